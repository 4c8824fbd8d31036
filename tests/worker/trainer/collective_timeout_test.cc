// The collective timeout's logic (Check) on a fake clock and a fake poll, and
// its thread: it fires once past the timeout or at once on a poll error, stays
// quiet while collectives complete, and stops when destroyed.
#include "worker/trainer/dist/collective_timeout.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(300);

CollectiveTimeoutOptions Options(absl::Duration poll_interval = absl::Milliseconds(1)) {
  CollectiveTimeoutOptions options;
  options.timeout = kTimeout;
  options.poll_interval = poll_interval;
  return options;
}

// Collects what on_fire was told.
class FireLog {
 public:
  CollectiveTimeout::OnFire Callback() {
    return [this](const std::string& reason) {
      {
        absl::MutexLock lock(&mu_);
        reasons_.push_back(reason);
      }
      if (!fired_.HasBeenNotified()) fired_.Notify();
    };
  }
  void WaitForFire() { fired_.WaitForNotification(); }
  std::vector<std::string> reasons() const {
    absl::MutexLock lock(&mu_);
    return reasons_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> reasons_ ABSL_GUARDED_BY(mu_);
  absl::Notification fired_;
};

TEST(CollectiveTimeoutTest, NothingPendingNeverFires) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(tracker, clock, nullptr, nullptr, Options());
  clock.Advance(absl::Hours(10));
  EXPECT_EQ(collective_timeout.Check(), std::nullopt);
}

TEST(CollectiveTimeoutTest, FiresOnceTheOldestCollectiveReachesTheTimeout) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(tracker, clock, nullptr, nullptr, Options());
  for (int bucket = 0; bucket < 3; ++bucket)
    tracker.End(tracker.Begin("allreduce", bucket));
  tracker.Begin("allreduce", 3);
  clock.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_EQ(collective_timeout.Check(), std::nullopt);
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(collective_timeout.Check(),
            "collective timeout: allreduce #4 (bucket 3) pending for 300.0 s "
            "(limit 300.0 s)");
}

TEST(CollectiveTimeoutTest, AgesTheOldestPendingCollective) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(tracker, clock, nullptr, nullptr, Options());
  const uint64_t first = tracker.Begin("allreduce", 0);
  clock.Advance(kTimeout / 2);
  tracker.Begin("allreduce", 1);
  clock.Advance(kTimeout / 2);
  // The first one has been pending for the whole timeout.
  std::optional<std::string> reason = collective_timeout.Check();
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("allreduce #1 (bucket 0)"));
  // Once it finished, the second is only half as old.
  tracker.End(first);
  EXPECT_EQ(collective_timeout.Check(), std::nullopt);
}

TEST(CollectiveTimeoutTest, NamesACollectiveWithoutABucket) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(tracker, clock, nullptr, nullptr, Options());
  tracker.Begin("barrier");
  clock.Advance(kTimeout + absl::Seconds(12));
  EXPECT_EQ(collective_timeout.Check(),
            "collective timeout: barrier #1 pending for 312.0 s (limit 300.0 s)");
}

TEST(CollectiveTimeoutTest, APollErrorFiresAtOnceNamingThePendingCollective) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(
      tracker, clock,
      [] { return absl::UnavailableError("NCCL error 6 (remote process exited)"); },
      nullptr, Options());
  tracker.Begin("allreduce", 2);
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(collective_timeout.Check(),
            "collective failed while allreduce #1 (bucket 2) was pending for 2.0 s: "
            "UNAVAILABLE: NCCL error 6 (remote process exited)");
}

TEST(CollectiveTimeoutTest, APollErrorFiresEvenWithNothingPending) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(
      tracker, clock, [] { return absl::InternalError("broken"); }, nullptr, Options());
  EXPECT_EQ(collective_timeout.Check(),
            "collective failed with no collective pending: INTERNAL: broken");
}

TEST(CollectiveTimeoutTest, CollectivesThePollRetiresDoNotFire) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  // A poll that finds every collective finished, as NCCL's event query does.
  CollectiveTimeout collective_timeout(
      tracker, clock,
      [&tracker] {
        for (const PendingCollectiveInfo& info : tracker.Pending()) {
          tracker.End(info.sequence);
        }
        return absl::OkStatus();
      },
      nullptr, Options());
  tracker.Begin("allreduce", 0);
  clock.Advance(kTimeout * 2);
  EXPECT_EQ(collective_timeout.Check(), std::nullopt);
}

TEST(CollectiveTimeoutTest, ThreadFiresOnceAfterTheTimeout) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  tracker.Begin("allreduce", 3);
  std::atomic<int> polls{0};
  FireLog log;
  {
    // Each poll moves the fake clock a quarter of the timeout on.
    CollectiveTimeout collective_timeout(
        tracker, clock,
        [&] {
          ++polls;
          clock.Advance(kTimeout / 4);
          return absl::OkStatus();
        },
        log.Callback(), Options());
    collective_timeout.Start();
    log.WaitForFire();
    const std::optional<std::string> reason = collective_timeout.reason();
    ASSERT_TRUE(reason.has_value());
    EXPECT_THAT(*reason, HasSubstr("collective timeout: allreduce #1 (bucket 3)"));
  }
  EXPECT_EQ(polls.load(), 4);  // fired at the fourth check, then stopped
  ASSERT_EQ(log.reasons().size(), 1u);
  EXPECT_EQ(log.reasons()[0],
            "collective timeout: allreduce #1 (bucket 3) pending for 300.0 s "
            "(limit 300.0 s)");
}

TEST(CollectiveTimeoutTest, ThreadStaysQuietWhileCollectivesComplete) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  uint64_t current = tracker.Begin("allreduce", 0);
  int polls = 0;  // the collective timeout's thread only
  absl::Notification enough;
  FireLog log;
  {
    // Every poll finds the pending collective finished and the next one
    // issued, 90% of the timeout later: far more than the timeout in all.
    CollectiveTimeout collective_timeout(
        tracker, clock,
        [&] {
          tracker.End(current);
          clock.Advance(kTimeout * 9 / 10);
          current = tracker.Begin("allreduce", polls % 4);
          if (++polls == 20) enough.Notify();
          return absl::OkStatus();
        },
        log.Callback(), Options());
    collective_timeout.Start();
    enough.WaitForNotification();
  }  // stopped and joined here
  EXPECT_GE(polls, 20);
  EXPECT_TRUE(log.reasons().empty());
}

TEST(CollectiveTimeoutTest, ThreadFiresAtOnceOnAPollError) {
  FakeClock clock;  // never advanced: the error alone fires it
  PendingCollectiveTracker tracker(clock);
  tracker.Begin("allreduce", 1);
  FireLog log;
  CollectiveTimeout collective_timeout(
      tracker, clock, [] { return absl::UnavailableError("peer gone"); }, log.Callback(),
      Options());
  collective_timeout.Start();
  log.WaitForFire();
  EXPECT_EQ(log.reasons().at(0),
            "collective failed while allreduce #1 (bucket 1) was pending for 0.0 s: "
            "UNAVAILABLE: peer gone");
}

TEST(CollectiveTimeoutTest, DestroyingStopsTheThreadWithoutWaitingForAPollInterval) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  tracker.Begin("allreduce", 0);
  FireLog log;
  {
    // An hour between checks: the destructor must wake the thread, not wait.
    CollectiveTimeout collective_timeout(tracker, clock, nullptr, log.Callback(),
                                         Options(absl::Hours(1)));
    collective_timeout.Start();
    clock.Advance(kTimeout * 10);
  }
  EXPECT_TRUE(log.reasons().empty());
}

TEST(CollectiveTimeoutTest, DestroyingACollectiveTimeoutThatNeverStartedIsFine) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  CollectiveTimeout collective_timeout(tracker, clock, nullptr, nullptr, Options());
  EXPECT_EQ(collective_timeout.reason(), std::nullopt);
}

TEST(CollectiveTimeoutExitTest, ACudaErrorExitsWithItsOwnCodeAndSaysWhy) {
  EXPECT_EXIT(ExitOnCudaError("cudaErrorIllegalAddress on CUDA device 0"),
              ::testing::ExitedWithCode(kTrainerExitCudaError),
              "tessera-train: exit reason: cudaErrorIllegalAddress on CUDA device 0");
  EXPECT_EXIT(ExitOnCollectiveFailure("collective timeout: allreduce #4"),
              ::testing::ExitedWithCode(kTrainerExitCollectiveFailure),
              "tessera-train: exit reason: collective timeout: allreduce #4");
  EXPECT_NE(kTrainerExitCudaError, kTrainerExitCollectiveFailure);
}

TEST(CollectiveTimeoutExitTest, TellsLibTorchsCudaErrorsFromOtherFailures) {
  EXPECT_TRUE(
      IsCudaErrorMessage("training failed: CUDA error: an illegal memory access "
                         "was encountered"));
  EXPECT_TRUE(
      IsCudaErrorMessage("training failed: CUDA out of memory. Tried to allocate "
                         "2.00 GiB"));
  EXPECT_TRUE(
      IsCudaErrorMessage("waiting for NCCL work: CUDA error 700 "
                         "cudaErrorIllegalAddress (...)"));
  EXPECT_FALSE(IsCudaErrorMessage("training failed: shape mismatch [8, 10] vs [8, 100]"));
  EXPECT_FALSE(
      IsCudaErrorMessage("collective failed: NCCL error 6 (remote process "
                         "exited)"));
}

}  // namespace
}  // namespace tessera::trainer
