// The tracker of a communicator's unfinished collectives: numbering, the oldest
// pending one, and ending collectives out of order or twice.
#include "worker/trainer/dist/pending_collective_tracker.h"

#include <optional>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

TEST(PendingCollectiveTrackerTest, NumbersCollectivesInIssueOrder) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  EXPECT_EQ(tracker.issued(), 0u);
  EXPECT_EQ(tracker.Begin("broadcast"), 1u);
  EXPECT_EQ(tracker.Begin("allreduce", 0), 2u);
  EXPECT_EQ(tracker.Begin("barrier"), 3u);
  EXPECT_EQ(tracker.issued(), 3u);
}

TEST(PendingCollectiveTrackerTest, OldestIsTheFirstUnfinishedWithItsStartTime) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  EXPECT_EQ(tracker.Oldest(), std::nullopt);
  const absl::Time first_start = clock.Now();
  const uint64_t first = tracker.Begin("allreduce", 0);
  clock.Advance(absl::Seconds(3));
  const absl::Time second_start = clock.Now();
  tracker.Begin("allreduce", 1);

  std::optional<PendingCollectiveInfo> oldest = tracker.Oldest();
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->sequence, first);
  EXPECT_EQ(oldest->name, "allreduce");
  EXPECT_EQ(oldest->bucket, 0);
  EXPECT_EQ(oldest->started_at, first_start);

  tracker.End(first);
  oldest = tracker.Oldest();
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->sequence, 2u);
  EXPECT_EQ(oldest->bucket, 1);
  EXPECT_EQ(oldest->started_at, second_start);
}

TEST(PendingCollectiveTrackerTest, ADeviceCollectiveIsReadyOnlyOnceMarked) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  const uint64_t host = tracker.Begin("allreduce", 0);
  EXPECT_TRUE(tracker.Oldest()->ready);  // host collectives start ready
  tracker.End(host);

  const uint64_t device = tracker.Begin("allreduce", 1, /*ready=*/false);
  EXPECT_FALSE(tracker.Oldest()->ready);
  tracker.MarkReady(device);
  EXPECT_TRUE(tracker.Oldest()->ready);
  tracker.End(device);
  tracker.MarkReady(device);  // after the end: nothing to mark
  EXPECT_EQ(tracker.Oldest(), std::nullopt);
}

TEST(PendingCollectiveTrackerTest, EndingOutOfOrderTwiceOrUnknownIsHarmless) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  const uint64_t a = tracker.Begin("allreduce", 0);
  const uint64_t b = tracker.Begin("allreduce", 1);
  const uint64_t c = tracker.Begin("allreduce", 2);
  tracker.End(b);
  tracker.End(b);
  tracker.End(999);
  std::vector<PendingCollectiveInfo> pending = tracker.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].sequence, a);
  EXPECT_EQ(pending[1].sequence, c);
  tracker.End(a);
  tracker.End(c);
  EXPECT_TRUE(tracker.Pending().empty());
  EXPECT_EQ(tracker.Oldest(), std::nullopt);
}

TEST(PendingCollectiveTrackerTest, DescribesCollectivesWithAndWithoutABucket) {
  EXPECT_EQ(DescribeCollective({.sequence = 412, .name = "allreduce", .bucket = 3}),
            "allreduce #412 (bucket 3)");
  EXPECT_EQ(DescribeCollective({.sequence = 7, .name = "barrier"}), "barrier #7");
}

TEST(PendingCollectiveTrackerTest, IssuingAndRetiringFromTwoThreadsKeepsCount) {
  FakeClock clock;
  PendingCollectiveTracker tracker(clock);
  constexpr int kPerThread = 1000;
  auto issue_and_retire = [&tracker] {
    for (int i = 0; i < kPerThread; ++i) tracker.End(tracker.Begin("allreduce", i));
  };
  std::thread other(issue_and_retire);
  issue_and_retire();
  other.join();
  EXPECT_EQ(tracker.issued(), 2u * kPerThread);
  EXPECT_TRUE(tracker.Pending().empty());
}

}  // namespace
}  // namespace tessera::trainer
