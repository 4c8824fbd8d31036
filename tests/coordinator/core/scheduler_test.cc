#include "coordinator/core/scheduler.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// (rank, worker, slot, local_rank) for compact expectations.
using RankTuple = std::tuple<int32_t, std::string, int32_t, int32_t>;

std::vector<RankTuple> Ranks(const Placement& placement) {
  std::vector<RankTuple> out;
  for (const RankPlacement& r : placement.ranks) {
    out.emplace_back(r.rank, r.worker, r.slot, r.local_rank);
  }
  return out;
}

WorkerInventory Worker(std::string name, int32_t slots,
                       std::vector<int32_t> used_slots = {}, bool alive = true) {
  return WorkerInventory{.worker = std::move(name),
                         .slots = slots,
                         .used_slots = std::move(used_slots),
                         .alive = alive};
}

TEST(SchedulerTest, PlacesJobOnOneWorkerWhenItFits) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 2}}, {Worker("a", 4)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_EQ(result.placements[0].job_id, 1);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "a", 0, 0}, RankTuple{1, "a", 1, 1}));
  EXPECT_THAT(result.pending_reasons, IsEmpty());
}

TEST(SchedulerTest, SpansTwoWorkersWhenNeitherAloneSuffices) {
  ScheduleResult result =
      Schedule({{.job_id = 7, .world_size = 4}}, {Worker("a", 2), Worker("b", 2)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "a", 0, 0}, RankTuple{1, "a", 1, 1},
                          RankTuple{2, "b", 0, 0}, RankTuple{3, "b", 1, 1}));
}

TEST(SchedulerTest, NumbersLocalRanksPerWorker) {
  // a has 1 free slot, b has 3: ranks 1..3 land on b with local ranks 0..2.
  ScheduleResult result =
      Schedule({{.job_id = 1, .world_size = 4}}, {Worker("a", 2, {0}), Worker("b", 3)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "a", 1, 0}, RankTuple{1, "b", 0, 0},
                          RankTuple{2, "b", 1, 1}, RankTuple{3, "b", 2, 2}));
}

TEST(SchedulerTest, PlacesNothingWhenTheWholeGangDoesNotFit) {
  ScheduleResult result = Schedule({{.job_id = 3, .world_size = 3}},
                                   {Worker("a", 2, {0}), Worker("b", 2, {1})});

  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(3, "needs 3 slots; 2 free")));
}

TEST(SchedulerTest, SkipsUsedSlots) {
  ScheduleResult result =
      Schedule({{.job_id = 1, .world_size = 2}}, {Worker("a", 4, {0, 2})});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "a", 1, 0}, RankTuple{1, "a", 3, 1}));
}

TEST(SchedulerTest, SkipsDeadWorkers) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 2}},
                                   {Worker("a", 8, {}, /*alive=*/false), Worker("b", 2)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "b", 0, 0}, RankTuple{1, "b", 1, 1}));
}

TEST(SchedulerTest, DeadWorkersDoNotCountAsRegistered) {
  ScheduleResult result = Schedule({{.job_id = 5, .world_size = 4}},
                                   {Worker("a", 8, {}, /*alive=*/false), Worker("b", 2)});

  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons,
              ElementsAre(Pair(5, "needs 4 slots; 2 registered")));
}

TEST(SchedulerTest, ReportsRegisteredWhenClusterIsTooSmall) {
  ScheduleResult result =
      Schedule({{.job_id = 9, .world_size = 4}}, {Worker("a", 1), Worker("b", 1)});

  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons,
              ElementsAre(Pair(9, "needs 4 slots; 2 registered")));
}

TEST(SchedulerTest, ReportsFreeWhenSlotsAreBusy) {
  ScheduleResult result = Schedule({{.job_id = 9, .world_size = 4}},
                                   {Worker("a", 2, {0, 1}), Worker("b", 2, {0})});

  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(9, "needs 4 slots; 1 free")));
}

TEST(SchedulerTest, ReportsZeroRegisteredWithNoWorkers) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 1}}, {});

  EXPECT_THAT(result.pending_reasons,
              ElementsAre(Pair(1, "needs 1 slots; 0 registered")));
}

TEST(SchedulerTest, EarlierJobTakesSlotsBeforeLaterJobInSamePass) {
  // 3 free slots: job 1 (2 ranks) is first in the queue and takes a:0 and a:1;
  // job 2 (2 ranks) then finds only b:0 free and waits.
  ScheduleResult result =
      Schedule({{.job_id = 1, .world_size = 2}, {.job_id = 2, .world_size = 2}},
               {Worker("a", 2), Worker("b", 1)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_EQ(result.placements[0].job_id, 1);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "a", 0, 0}, RankTuple{1, "a", 1, 1}));
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(2, "needs 2 slots; 1 free")));
}

TEST(SchedulerTest, QueueOrderDecidesWhoGetsContestedSlots) {
  // Same jobs as above in the other order: now job 2 is placed and job 1 waits.
  ScheduleResult result =
      Schedule({{.job_id = 2, .world_size = 2}, {.job_id = 1, .world_size = 2}},
               {Worker("a", 2), Worker("b", 1)});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_EQ(result.placements[0].job_id, 2);
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(1, "needs 2 slots; 1 free")));
}

TEST(SchedulerTest, PlacedJobsNeverShareASlot) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 3},
                                    {.job_id = 2, .world_size = 2},
                                    {.job_id = 3, .world_size = 1}},
                                   {Worker("a", 2, {1}), Worker("b", 3), Worker("c", 2)});

  ASSERT_EQ(result.placements.size(), 3u);
  std::set<std::pair<std::string, int32_t>> taken;
  for (const Placement& p : result.placements) {
    for (const RankPlacement& r : p.ranks) {
      EXPECT_TRUE(taken.insert({r.worker, r.slot}).second)
          << r.worker << "/" << r.slot << " given twice";
      EXPECT_FALSE(r.worker == "a" && r.slot == 1) << "a/1 was already in use";
    }
  }
  EXPECT_EQ(taken.size(), 6u);
  EXPECT_THAT(result.pending_reasons, IsEmpty());
}

TEST(SchedulerTest, PackPutsGangOnTheTightestSingleWorkerThatHoldsIt) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 2}},
                                   {Worker("a", 4), Worker("b", 2), Worker("c", 3)});
  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_THAT(Ranks(result.placements[0]),
              ElementsAre(RankTuple{0, "b", 0, 0}, RankTuple{1, "b", 1, 1}));
}

TEST(SchedulerTest, SpreadDealsRanksAcrossWorkers) {
  PendingJob job{.job_id = 1, .world_size = 4, .policy = PlacementPolicy::kSpread};
  ScheduleResult result =
      Schedule({job}, {Worker("a", 4), Worker("b", 4), Worker("c", 4)});
  ASSERT_EQ(result.placements.size(), 1u);
  std::map<std::string, int> per_worker;
  for (const RankPlacement& r : result.placements[0].ranks) ++per_worker[r.worker];
  EXPECT_THAT(per_worker, UnorderedElementsAre(Pair("a", 2), Pair("b", 1), Pair("c", 1)));
}

TEST(SchedulerTest, PerNodeShapesFourRanksAsOneByFourTwoByTwoOrFourByOne) {
  const std::vector<WorkerInventory> cluster = {Worker("a", 4), Worker("b", 4),
                                                Worker("c", 4), Worker("d", 4)};
  for (int per_node : {4, 2, 1}) {
    PendingJob job{.job_id = 1, .world_size = 4, .per_node = per_node};
    ScheduleResult result = Schedule({job}, cluster);
    ASSERT_EQ(result.placements.size(), 1u) << per_node;
    std::map<std::string, int> per_worker;
    for (const RankPlacement& r : result.placements[0].ranks) ++per_worker[r.worker];
    EXPECT_EQ(per_worker.size(), static_cast<size_t>(4 / per_node)) << per_node;
    for (const auto& [w, n] : per_worker) EXPECT_EQ(n, per_node) << w;
  }
  // nodes: 2 means 2 workers with 2 ranks each.
  ScheduleResult two = Schedule({{.job_id = 1, .world_size = 4, .nodes = 2}}, cluster);
  ASSERT_EQ(two.placements.size(), 1u);
  std::set<std::string> used;
  for (const RankPlacement& r : two.placements[0].ranks) used.insert(r.worker);
  EXPECT_EQ(used.size(), 2u);
}

TEST(SchedulerTest, ShapeThatNoWorkerCanHoldIsPendingWithReason) {
  ScheduleResult result = Schedule({{.job_id = 1, .world_size = 4, .per_node = 4}},
                                   {Worker("a", 2), Worker("b", 2)});
  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons,
              ElementsAre(Pair(1, "needs 1 workers with 4 slots each; 0 registered")));
  ScheduleResult bad =
      Schedule({{.job_id = 2, .world_size = 3, .per_node = 2}}, {Worker("a", 4)});
  EXPECT_THAT(bad.pending_reasons,
              ElementsAre(Pair(2, "world size 3 is not a multiple of per_node 2")));
}

TEST(SchedulerTest, HigherPriorityGoesFirstThenFifo) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ScheduleResult result =
      Schedule({{.job_id = 1, .world_size = 1, .priority = 0, .queued_since = t0},
                {.job_id = 2,
                 .world_size = 1,
                 .priority = 5,
                 .queued_since = t0 + absl::Seconds(9)},
                {.job_id = 3,
                 .world_size = 1,
                 .priority = 5,
                 .queued_since = t0 + absl::Seconds(1)}},
               {Worker("a", 2)}, t0 + absl::Seconds(10));
  ASSERT_EQ(result.placements.size(), 2u);
  EXPECT_EQ(result.placements[0].job_id, 3);
  EXPECT_EQ(result.placements[1].job_id, 2);
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(1, "needs 1 slots; 0 free")));
}

TEST(SchedulerTest, BackfillStopsOnceABlockedJobHasWaitedTooLong) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // a has 2 slots, one busy: the 2-rank job cannot start, the 1-rank job can.
  const std::vector<WorkerInventory> cluster = {Worker("a", 2, {0})};
  const std::vector<PendingJob> queue = {
      {.job_id = 1, .world_size = 2, .queued_since = t0},
      {.job_id = 2, .world_size = 1, .queued_since = t0}};
  SchedulerOptions options{.reserve_after = absl::Minutes(10)};

  ScheduleResult early = Schedule(queue, cluster, t0 + absl::Minutes(1), options);
  ASSERT_EQ(early.placements.size(), 1u);
  EXPECT_EQ(early.placements[0].job_id, 2) << "a small job may backfill at first";

  ScheduleResult late = Schedule(queue, cluster, t0 + absl::Minutes(11), options);
  EXPECT_THAT(late.placements, IsEmpty()) << "the starving job now holds the queue";
  EXPECT_THAT(late.pending_reasons[2], ::testing::HasSubstr("waiting behind job 1"));
}

TEST(SchedulerTest, SmallerLaterJobUsesSlotsABlockedJobCannot) {
  ScheduleResult result =
      Schedule({{.job_id = 1, .world_size = 4}, {.job_id = 2, .world_size = 1}},
               {Worker("a", 4, {0, 1})});

  ASSERT_EQ(result.placements.size(), 1u);
  EXPECT_EQ(result.placements[0].job_id, 2);
  EXPECT_THAT(Ranks(result.placements[0]), ElementsAre(RankTuple{0, "a", 2, 0}));
  EXPECT_THAT(result.pending_reasons, ElementsAre(Pair(1, "needs 4 slots; 2 free")));
}

TEST(SchedulerTest, RejectsNonPositiveWorldSize) {
  ScheduleResult result = Schedule({{.job_id = 4, .world_size = 0}}, {Worker("a", 2)});

  EXPECT_THAT(result.placements, IsEmpty());
  EXPECT_THAT(result.pending_reasons,
              UnorderedElementsAre(Pair(4, "world size must be positive, got 0")));
}

}  // namespace
}  // namespace tessera
