// LeaseState and LeaseKeeper with a fake clock: the rank stops once the lease
// has run out since the send time of its last successful renewal, and not
// before; a coordinator that no longer counts the rank stops it at once. The
// keeper renews at the reporting period the coordinator asks for, and every
// renewal carries the rank's progress report.
#include "worker/trainer/run/lease.h"

#include <deque>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/rank_phase.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(LeaseStateTest, CountsTheFirstContactLeaseFromTheStart) {
  LeaseState state(kStart, absl::Seconds(15));
  EXPECT_FALSE(state.Expired(kStart + absl::Seconds(15)));
  EXPECT_TRUE(state.Expired(kStart + absl::Seconds(15) + absl::Milliseconds(1)));
}

TEST(LeaseStateTest, CountsFromTheSendTimeOfTheLastRenewal) {
  LeaseState state(kStart, absl::Seconds(15));
  state.Renewed(kStart + absl::Seconds(10), absl::Seconds(90));
  EXPECT_EQ(state.expires(), kStart + absl::Seconds(100));
  // An older renewal that completes late moves nothing back.
  state.Renewed(kStart + absl::Seconds(5), absl::Seconds(90));
  EXPECT_EQ(state.last_sent(), kStart + absl::Seconds(10));
}

// A keeper whose renewals answer from a script and whose clock moves only when
// the test (or the scripted renewal, to model a slow RPC) moves it.
class LeaseKeeperTest : public ::testing::Test {
 protected:
  LeaseKeeperTest()
      : keeper_(
            [this](absl::Duration deadline) -> absl::StatusOr<LeaseGrant> {
              deadlines_.push_back(deadline);
              now_ += rpc_time_;
              if (answers_.empty()) return absl::UnavailableError("no answer");
              absl::StatusOr<absl::Duration> a = answers_.front();
              answers_.pop_front();
              if (!a.ok()) return a.status();
              return LeaseGrant{.lease = *a, .report_every = report_every_};
            },
            [this](const std::string& why) { fences_.push_back(why); },
            [this](const std::string& line) { logs_.push_back(line); },
            [this] { return now_; }, kStart) {}

  absl::Time now_ = kStart;
  absl::Duration rpc_time_ = absl::Milliseconds(10);
  // The leases the coordinator answers, in order (an error: that renewal fails).
  std::deque<absl::StatusOr<absl::Duration>> answers_;
  // The reporting period every answer asks for (zero: not set, as from a
  // coordinator older than progress reports).
  absl::Duration report_every_ = absl::ZeroDuration();
  std::vector<absl::Duration> deadlines_;
  std::vector<std::string> fences_;
  std::vector<std::string> logs_;
  LeaseKeeper keeper_;
};

TEST_F(LeaseKeeperTest, RenewsEveryQuarterLeaseWhenTheCoordinatorSetsNoReportPeriod) {
  for (int i = 0; i < 20; ++i) {
    answers_.push_back(absl::Seconds(20));
    const absl::Duration wait = keeper_.Step();
    EXPECT_EQ(wait, absl::Seconds(5));
    now_ += wait;
  }
  EXPECT_TRUE(fences_.empty());
  EXPECT_EQ(deadlines_.size(), 20u);
}

TEST_F(LeaseKeeperTest, RenewsAtTheReportPeriodTheCoordinatorAsksFor) {
  EXPECT_EQ(keeper_.report_every(), absl::Seconds(2));  // before any answer
  report_every_ = absl::Seconds(2);
  for (int i = 0; i < 10; ++i) {
    answers_.push_back(absl::Seconds(90));
    const absl::Duration wait = keeper_.Step();
    EXPECT_EQ(wait, absl::Seconds(2));
    now_ += wait;
  }
  EXPECT_EQ(deadlines_.size(), 10u);
  EXPECT_EQ(keeper_.report_every(), absl::Seconds(2));
}

TEST_F(LeaseKeeperTest, AQuarterLeaseShorterThanTheReportPeriodWins) {
  report_every_ = absl::Seconds(2);
  answers_.push_back(absl::Seconds(4));
  EXPECT_EQ(keeper_.Step(), absl::Seconds(1));
}

TEST_F(LeaseKeeperTest, FollowsAChangedReportPeriod) {
  report_every_ = absl::Seconds(2);
  answers_.push_back(absl::Seconds(90));
  EXPECT_EQ(keeper_.Step(), absl::Seconds(2));
  report_every_ = absl::Seconds(5);
  answers_.push_back(absl::Seconds(90));
  now_ += absl::Seconds(2);
  EXPECT_EQ(keeper_.Step(), absl::Seconds(5));
  report_every_ = absl::ZeroDuration();  // back to lease/4
  answers_.push_back(absl::Seconds(90));
  now_ += absl::Seconds(5);
  EXPECT_EQ(keeper_.Step(), absl::Milliseconds(22500));
}

TEST(LeaseRenewalTest, EveryRenewalCarriesTheProgressAtThatMoment) {
  FakeClock clock;
  ProgressTracker progress(clock);
  testing::FakeCoordinatorClient coordinator;
  coordinator.SetLeaseGrant(
      LeaseGrant{.lease = absl::Seconds(90), .report_every = absl::Seconds(2)});
  const LeaseKeeper::Renew renew = RenewWithProgress(coordinator, progress);

  absl::StatusOr<LeaseGrant> grant = renew(absl::Seconds(5));
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->lease, absl::Seconds(90));
  EXPECT_EQ(grant->report_every, absl::Seconds(2));

  progress.SetStep(411);
  progress.BeginStep();
  progress.Enter(RankPhase::kData);
  clock.Advance(absl::Seconds(7));
  ASSERT_TRUE(renew(absl::Seconds(5)).ok());

  const std::vector<ProgressReport> reports = coordinator.progress_reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].phase, "startup");
  EXPECT_EQ(reports[0].step, 0);
  EXPECT_EQ(reports[1].phase, "data");
  EXPECT_EQ(reports[1].step, 411);
  EXPECT_EQ(reports[1].phase_elapsed_ms, 7000);
}

TEST_F(LeaseKeeperTest, FencesOnceTheLeaseRunsOutSinceTheLastSuccessfulSend) {
  answers_.push_back(absl::Seconds(20));
  ASSERT_EQ(keeper_.Step(), absl::Seconds(5));  // renewal sent at kStart
  // From here on nothing answers.
  absl::Time fenced_at;
  for (int i = 0; i < 100 && fences_.empty(); ++i) {
    const absl::Duration wait = keeper_.Step();
    if (!fences_.empty()) {
      fenced_at = now_;
      break;
    }
    // Never sleeps past the lease's end.
    EXPECT_LE(now_ + wait, kStart + absl::Seconds(20) + absl::Milliseconds(1));
    now_ += wait;
  }
  ASSERT_EQ(fences_.size(), 1u);
  EXPECT_TRUE(keeper_.fenced());
  // Counted from the SEND time of the renewal (kStart), not its answer.
  EXPECT_GT(fenced_at, kStart + absl::Seconds(20));
  EXPECT_LE(fenced_at, kStart + absl::Seconds(20) + absl::Milliseconds(20));
  EXPECT_NE(fences_[0].find("lost the coordinator for 20s: stopping so the rank "
                            "cannot run twice"),
            std::string::npos)
      << fences_[0];
  // One line when renewals start failing, not one per retry.
  EXPECT_EQ(logs_.size(), 1u);
  // A fenced keeper does nothing more.
  EXPECT_EQ(keeper_.Step(), absl::InfiniteDuration());
  EXPECT_EQ(fences_.size(), 1u);
}

TEST_F(LeaseKeeperTest, DoesNotFenceBeforeTheLeaseRunsOut) {
  answers_.push_back(absl::Seconds(20));
  keeper_.Step();
  // Failing renewals until just before the end, then one succeeds.
  while (now_ + absl::Seconds(1) < kStart + absl::Seconds(20)) {
    now_ += keeper_.Step();
  }
  EXPECT_TRUE(fences_.empty());
  answers_.push_back(absl::Seconds(20));
  const absl::Time sent = now_;
  keeper_.Step();
  EXPECT_TRUE(fences_.empty());
  EXPECT_EQ(keeper_.state().expires(), sent + absl::Seconds(20));
  EXPECT_NE(logs_.back().find("lease renewed again after"), std::string::npos)
      << logs_.back();
}

TEST_F(LeaseKeeperTest, RenewalDeadlineNeverReachesPastTheLeaseEnd) {
  rpc_time_ = absl::ZeroDuration();
  answers_.push_back(absl::Seconds(8));
  keeper_.Step();
  now_ += absl::Seconds(6);
  keeper_.Step();  // fails
  ASSERT_EQ(deadlines_.size(), 2u);
  EXPECT_EQ(deadlines_[0], absl::Seconds(5));  // the first-contact lease is longer
  EXPECT_EQ(deadlines_[1], absl::Seconds(2));  // 8 s lease, sent 6 s after
}

TEST_F(LeaseKeeperTest, FencesWithoutAnyRenewalAfterTheFirstContactLease) {
  absl::Time fenced_at;
  // Fake time: bounded by steps, not seconds (the fence is due within 10,000).
  for (int steps = 0; fences_.empty(); ++steps) {
    ASSERT_LT(steps, 10000) << "never fenced; fake time is at " << (now_ - kStart);
    const absl::Duration wait = keeper_.Step();
    if (!fences_.empty()) fenced_at = now_;
    now_ += wait;
  }
  EXPECT_GT(fenced_at, kStart + kFirstContactLease);
  EXPECT_LE(fenced_at, kStart + kFirstContactLease + absl::Milliseconds(20));
  EXPECT_NE(fences_[0].find("never renewed"), std::string::npos) << fences_[0];
}

TEST_F(LeaseKeeperTest, FencesAtOnceWhenTheRankIsNoLongerCurrent) {
  answers_.push_back(absl::Seconds(20));
  keeper_.Step();
  answers_.push_back(
      absl::AbortedError("attempt 1 rank 0 of job 3 is no longer current"));
  now_ += absl::Seconds(5);
  EXPECT_EQ(keeper_.Step(), absl::InfiniteDuration());
  ASSERT_EQ(fences_.size(), 1u);
  EXPECT_NE(fences_[0].find("no longer counts this rank"), std::string::npos)
      << fences_[0];
}

TEST_F(LeaseKeeperTest, UnauthenticatedAnswersDoNotFenceBeforeTheLeaseEnds) {
  answers_.push_back(absl::Seconds(20));
  keeper_.Step();
  answers_.push_back(absl::UnauthenticatedError("bad credential"));
  now_ += absl::Seconds(5);
  EXPECT_EQ(keeper_.Step(), absl::Seconds(1));
  EXPECT_TRUE(fences_.empty());
}

TEST_F(LeaseKeeperTest, CoordinatorWithoutLeasesTurnsTheKeeperOff) {
  answers_.push_back(absl::UnimplementedError("unknown method RenewLease"));
  EXPECT_EQ(keeper_.Step(), absl::InfiniteDuration());
  now_ += absl::Hours(1);
  EXPECT_EQ(keeper_.Step(), absl::InfiniteDuration());
  EXPECT_TRUE(fences_.empty());
  EXPECT_EQ(deadlines_.size(), 1u);
}

TEST(LeaseKeeperThreadTest, StopsItsThreadWhenDestroyed) {
  absl::Notification renewed;
  {
    LeaseKeeper keeper(
        [&](absl::Duration) -> absl::StatusOr<LeaseGrant> {
          if (!renewed.HasBeenNotified()) renewed.Notify();
          return LeaseGrant{.lease = absl::Seconds(60),
                            .report_every = absl::Seconds(15)};
        },
        [](const std::string& why) { FAIL() << "fenced: " << why; },
        [](const std::string&) {}, MonotonicNow, MonotonicNow());
    keeper.Start();
    ASSERT_TRUE(renewed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }  // joins without waiting for the next renewal (15 s away)
}

TEST(LeaseKeeperThreadTest, ReportNowRenewsAtOnceCarryingTheLatestProgress) {
  FakeClock clock;
  ProgressTracker progress(clock);
  testing::FakeCoordinatorClient coordinator;
  // The next renewal would be 15 s away.
  coordinator.SetLeaseGrant(
      LeaseGrant{.lease = absl::Seconds(60), .report_every = absl::ZeroDuration()});
  LeaseKeeper keeper(
      RenewWithProgress(coordinator, progress),
      [](const std::string& why) { FAIL() << "fenced: " << why; },
      [](const std::string&) {}, MonotonicNow, MonotonicNow());
  EXPECT_FALSE(keeper.ReportNow(absl::Seconds(1)));  // not started
  keeper.Start();
  progress.SetStep(208);
  progress.Enter(RankPhase::kDone);
  ASSERT_TRUE(keeper.ReportNow(absl::Seconds(30)));
  const std::vector<ProgressReport> reports = coordinator.progress_reports();
  ASSERT_GE(reports.size(), 1u);
  EXPECT_EQ(reports.back().step, 208);
  EXPECT_EQ(reports.back().phase, "done");
}

TEST(LeaseKeeperThreadTest, ReportNowReturnsAtOnceFromAKeeperThatStoppedRenewing) {
  testing::FakeCoordinatorClient coordinator;
  coordinator.SetLeaseGrant(absl::UnimplementedError("unknown method RenewLease"));
  FakeClock clock;
  ProgressTracker progress(clock);
  LeaseKeeper keeper(
      RenewWithProgress(coordinator, progress),
      [](const std::string& why) { FAIL() << "fenced: " << why; },
      [](const std::string&) {}, MonotonicNow, MonotonicNow());
  keeper.Start();
  // The first renewal (which this call may still catch) turns the keeper off;
  // after it nothing renews, and ReportNow does not wait.
  keeper.ReportNow(absl::Seconds(30));
  EXPECT_FALSE(keeper.ReportNow(absl::Seconds(30)));
  EXPECT_EQ(coordinator.progress_reports().size(), 1u);
}

TEST(ProcessAgeTest, IsTheTimeSinceThisProcessStarted) {
  const absl::Duration age = ProcessAge();
  EXPECT_GT(age, absl::ZeroDuration());
  EXPECT_LT(age, absl::Minutes(30));
}

}  // namespace
}  // namespace tessera::trainer
