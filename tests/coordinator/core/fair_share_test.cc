// FairShare's usage decay and factors, and the pure scheduler ordering
// equal-priority jobs by them under owner limits, over a fake clock.
#include "coordinator/core/fair_share.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordinator/core/scheduler.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

TEST(FairShareTest, UsageHalvesEachHalfLife) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 100, kStart);
  EXPECT_DOUBLE_EQ(share.Usage("alice", kStart), 100);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(1)), 50, 1e-9);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(2)), 25, 1e-9);
  share.Charge("alice", 10, kStart + absl::Hours(1));
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(1)), 60, 1e-9);
  EXPECT_EQ(share.Usage("nobody", kStart), 0);
}

TEST(FairShareTest, UserWithoutUsageHasFactorOneAndHeavyUserLess) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 1000, kStart);
  std::map<std::string, double> f = share.Factors(kStart, {"bob"});
  EXPECT_DOUBLE_EQ(f.at("bob"), 1.0);
  // Alice has all the usage with a share of 1/2: 2^-(1 / 0.5) = 0.25.
  EXPECT_NEAR(f.at("alice"), 0.25, 1e-9);
}

TEST(FairShareTest, EqualUsageGivesEqualFactorsOfOneHalf) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 50, kStart);
  share.Charge("bob", 50, kStart);
  std::map<std::string, double> f = share.Factors(kStart);
  EXPECT_NEAR(f.at("alice"), 0.5, 1e-9);
  EXPECT_NEAR(f.at("bob"), 0.5, 1e-9);
}

TEST(FairShareTest, RestoredUsageDecaysFromItsTime) {
  FairShare share(absl::Hours(1));
  share.Restore("alice", 80, kStart);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(3)), 10, 1e-9);
  ASSERT_EQ(share.Entries().size(), 1u);
  EXPECT_EQ(share.Entries()[0].user, "alice");
}

PendingJob OneSlotJob(int64_t id, const std::string& owner, absl::Time queued) {
  return PendingJob{
      .job_id = id, .world_size = 1, .queued_since = queued, .owner = owner};
}

// Alice queues 20 one-slot jobs, then Bob 5, at equal priority, on a 2-slot
// cluster where each job runs 60 s. Starts are recorded in order.
std::vector<std::string> SimulateStarts(const SchedulerOptions& limits) {
  FairShare share(absl::Hours(24));
  absl::Time now = kStart;
  std::vector<PendingJob> queue;
  int64_t next_id = 1;
  for (int i = 0; i < 20; ++i) queue.push_back(OneSlotJob(next_id++, "alice", now));
  bool bob_queued = false;
  struct Running {
    std::string owner;
    int32_t slot;
    absl::Time until;
  };
  std::vector<Running> running;
  std::vector<std::string> starts;
  while (!queue.empty() && starts.size() < 25) {
    // Charge the running ranks, end those that are done.
    std::vector<int32_t> used;
    std::map<std::string, int32_t> placed;
    for (const Running& r : running) {
      used.push_back(r.slot);
      ++placed[r.owner];
    }
    std::set<std::string> owners;
    for (const PendingJob& j : queue) owners.insert(j.owner);
    std::map<std::string, double> factors = share.Factors(now, owners);
    for (PendingJob& j : queue) j.fair_share = factors.at(j.owner);
    SchedulerOptions options = limits;
    options.placed_by_owner = placed;
    ScheduleResult result =
        Schedule(queue, {WorkerInventory{.worker = "w", .slots = 2, .used_slots = used}},
                 now, options);
    for (const Placement& p : result.placements) {
      auto it = std::find_if(queue.begin(), queue.end(),
                             [&](const PendingJob& j) { return j.job_id == p.job_id; });
      starts.push_back(it->owner);
      running.push_back(Running{it->owner, p.ranks[0].slot, now + absl::Seconds(60)});
      queue.erase(it);
    }
    if (!bob_queued) {
      // Bob queues once Alice's first jobs hold the whole cluster.
      for (int i = 0; i < 5; ++i) queue.push_back(OneSlotJob(next_id++, "bob", now));
      bob_queued = true;
    }
    // Run to the next end.
    absl::Time next = absl::InfiniteFuture();
    for (const Running& r : running) next = std::min(next, r.until);
    if (next == absl::InfiniteFuture()) break;
    for (const Running& r : running) {
      share.Charge(r.owner, absl::ToDoubleSeconds(next - now), next);
    }
    now = next;
    std::erase_if(running, [&](const Running& r) { return r.until <= now; });
  }
  return starts;
}

TEST(FairShareSchedulingTest, LightUserIsNotStarvedByHeavyUsersQueue) {
  const std::vector<std::string> starts = SimulateStarts(SchedulerOptions{});
  ASSERT_GE(starts.size(), 12u);
  // The first two starts are Alice's, before Bob queued; then the next 10.
  EXPECT_EQ(starts[0], "alice");
  EXPECT_EQ(starts[1], "alice");
  std::vector<std::string> next(starts.begin() + 2, starts.begin() + 12);
  const auto first_bob = std::find(next.begin(), next.end(), "bob");
  ASSERT_NE(first_bob, next.end());
  EXPECT_LT(first_bob - next.begin(), 3) << "Bob's first job is among the next 3 starts";
  EXPECT_GE(std::count(next.begin(), next.end(), "bob"), 4);
}

TEST(FairShareSchedulingTest, WithoutFairShareFifoWouldStarveTheLightUser) {
  // The same queue ordered only by age: every one of Alice's 20 jobs first.
  std::vector<PendingJob> queue;
  for (int i = 0; i < 20; ++i) queue.push_back(OneSlotJob(i + 1, "alice", kStart));
  queue.push_back(OneSlotJob(21, "bob", kStart + absl::Seconds(1)));
  ScheduleResult result = Schedule(queue, {WorkerInventory{.worker = "w", .slots = 2}});
  ASSERT_EQ(result.placements.size(), 2u);
  EXPECT_EQ(result.placements[0].job_id, 1);
  // With Bob's factor above Alice's, Bob's job is placed first.
  for (PendingJob& j : queue) j.fair_share = j.owner == "bob" ? 1.0 : 0.25;
  result = Schedule(queue, {WorkerInventory{.worker = "w", .slots = 2}});
  ASSERT_EQ(result.placements.size(), 2u);
  EXPECT_EQ(result.placements[0].job_id, 21);
}

TEST(OwnerLimitsTest, RunningRanksLimitHoldsTheJobAndNamesTheFlag) {
  SchedulerOptions options;
  options.max_ranks_per_owner = 2;
  options.placed_by_owner["alice"] = 2;
  ScheduleResult result =
      Schedule({OneSlotJob(1, "alice", kStart)},
               {WorkerInventory{.worker = "w", .slots = 8}}, kStart, options);
  EXPECT_TRUE(result.placements.empty());
  EXPECT_NE(result.pending_reasons[1].find("--max-running-ranks"), std::string::npos);
}

TEST(OwnerLimitsTest, SlotShareAppliesOnlyWhileAnotherUserWaits) {
  SchedulerOptions options;
  options.max_slot_share = 0.5;
  options.placed_by_owner["alice"] = 1;
  const std::vector<WorkerInventory> cluster = {
      WorkerInventory{.worker = "w", .slots = 2, .used_slots = {0}}};
  // Alone in the queue, Alice may take the whole cluster.
  ScheduleResult alone =
      Schedule({OneSlotJob(1, "alice", kStart)}, cluster, kStart, options);
  EXPECT_EQ(alone.placements.size(), 1u);
  // With Bob waiting (for a slot that Alice's job would take), Alice is held.
  PendingJob bob =
      PendingJob{.job_id = 2, .world_size = 2, .queued_since = kStart, .owner = "bob"};
  ScheduleResult shared =
      Schedule({OneSlotJob(1, "alice", kStart), bob}, cluster, kStart, options);
  EXPECT_TRUE(shared.placements.empty());
  EXPECT_NE(shared.pending_reasons[1].find("--max-slot-share"), std::string::npos);
}

TEST(OwnerLimitsTest, ExemptOwnersAreNotLimited) {
  SchedulerOptions options;
  options.max_ranks_per_owner = 1;
  options.placed_by_owner["root"] = 5;
  PendingJob job = OneSlotJob(1, "root", kStart);
  job.exempt = true;
  ScheduleResult result =
      Schedule({job}, {WorkerInventory{.worker = "w", .slots = 8}}, kStart, options);
  EXPECT_EQ(result.placements.size(), 1u);
}

}  // namespace
}  // namespace tessera
