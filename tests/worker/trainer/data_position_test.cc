// EpochPlan: where a run stands in its data, independent of the world size.
// The resume contract is checked on sample ids: a run stopped at world size W
// and resumed at W' visits exactly the samples (in the same global order) that
// the uninterrupted run would have visited next.
#include "worker/trainer/data/data_position.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/data/distributed_sampler.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;

EpochPlan Plan(int64_t epoch_size, int world, int64_t batch, int64_t accum = 1) {
  absl::StatusOr<EpochPlan> plan =
      EpochPlan::Create(EpochPlanOptions{.epoch_size = epoch_size,
                                         .world_size = world,
                                         .batch_size = batch,
                                         .accum = accum});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

DistributedSampler Sampler(int64_t n, int rank, int world, int64_t seed = 11) {
  absl::StatusOr<DistributedSampler> s =
      DistributedSampler::Create(DistributedSamplerOptions{
          .dataset_size = n, .rank = rank, .world_size = world, .seed = seed});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// The sample ids a world of `world` ranks visits, micro-batch by micro-batch,
// for `batches` micro-batches from `start`: each micro-batch's ids of every
// rank, gathered in global order (rank r's j-th sample is at r + j * world).
std::vector<int64_t> Visited(int64_t n, int world, int64_t batch, DataPosition start,
                             int64_t batches) {
  const EpochPlan plan = Plan(n, world, batch);
  std::vector<int64_t> ids;
  for (int64_t k = 0; k < batches; ++k) {
    const DataPosition at = plan.Advance(start, k);
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < world; ++r) {
      per_rank.push_back(
          plan.RankBatch(Sampler(n, r, world).EpochOrder(at.epoch), at, r));
    }
    for (int64_t j = 0; j < batch; ++j) {
      for (int r = 0; r < world; ++r) ids.push_back(per_rank[r][j]);
    }
  }
  return ids;
}

TEST(EpochPlanTest, AtTheSameWorldSizeRanksGetTheirStridedShardsBatchByBatch) {
  const int64_t n = 103;
  const EpochPlan plan = Plan(n, 3, 4);
  for (int r = 0; r < 3; ++r) {
    const DistributedSampler sampler = Sampler(n, r, 3);
    const std::vector<int64_t> shard = sampler.EpochIndices(2);
    const std::vector<int64_t> order = sampler.EpochOrder(2);
    for (int64_t b = 0; b < plan.steps_per_epoch(); ++b) {
      const DataPosition at{2, b * plan.samples_per_batch()};
      EXPECT_EQ(plan.RankBatch(order, at, r),
                std::vector<int64_t>(shard.begin() + b * 4, shard.begin() + (b + 1) * 4))
          << "rank " << r << " batch " << b;
    }
  }
}

TEST(EpochPlanTest, EveryRankGetsTheSameNumberOfStepsAndTheTailIsDropped) {
  // 103 samples, 2 ranks x 2 micro-batches x 5: 20 per step, 5 steps, 3 dropped.
  const EpochPlan plan = Plan(103, 2, 5, 2);
  EXPECT_EQ(plan.steps_per_epoch(), 5);
  EXPECT_EQ(plan.Advance({0, 0}, 10), (DataPosition{1, 0})) << "the tail is skipped";
  EXPECT_EQ(plan.Advance({0, 0}, 9), (DataPosition{0, 90}));
  EXPECT_EQ(plan.StepsUntilEpoch({0, 0}, 3), 15);
  EXPECT_EQ(plan.StepsUntilEpoch({1, 40}, 3), 3 + 5);
  EXPECT_EQ(
      EpochPlan::Create({.epoch_size = 19, .world_size = 2, .batch_size = 5, .accum = 2})
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(EpochPlanTest, AWorldOfOneResumedAtTwoVisitsExactlyTheSamplesTheRunWouldHaveNext) {
  const int64_t n = 96;
  // Uninterrupted: one rank, batches of 8, 12 micro-batches per epoch, two
  // epochs.
  const std::vector<int64_t> uninterrupted = Visited(n, 1, 8, {0, 0}, 24);
  // Stopped after 5 micro-batches (40 samples of epoch 0), resumed on two
  // ranks of 4 samples each: the same global batch of 8.
  const EpochPlan one = Plan(n, 1, 8);
  const DataPosition stopped = one.Advance({0, 0}, 5);
  ASSERT_EQ(stopped, (DataPosition{0, 40}));
  const std::vector<int64_t> resumed = Visited(n, 2, 4, stopped, 24 - 5);
  EXPECT_EQ(resumed,
            std::vector<int64_t>(uninterrupted.begin() + 40, uninterrupted.end()))
      << "the resumed run visits the rest of the same order, in order";
}

TEST(EpochPlanTest, FourRanksResumedOnTwoContinueTheSameOrderWithTheirOwnBatches) {
  const int64_t n = 200;
  // Four ranks of 5: 20 per micro-batch; stop after 3 (60 samples).
  const EpochPlan four = Plan(n, 4, 5);
  const DataPosition stopped = four.Advance({0, 0}, 3);
  ASSERT_EQ(stopped, (DataPosition{0, 60}));
  // Two ranks of 5 take the next 10 of the same order per micro-batch.
  const std::vector<int64_t> order = Sampler(n, 0, 4).EpochOrder(0);
  const std::vector<int64_t> resumed = Visited(n, 2, 5, stopped, 14);
  EXPECT_EQ(resumed, std::vector<int64_t>(order.begin() + 60, order.begin() + 200));
}

TEST(EpochPlanTest, TheGlobalOrderIsTheSameOnEveryRankAndAtEveryWorldSize) {
  EXPECT_EQ(Sampler(50, 0, 1).EpochOrder(3), Sampler(50, 1, 2).EpochOrder(3));
  EXPECT_EQ(Sampler(50, 2, 5).EpochOrder(3), Sampler(50, 0, 2).EpochOrder(3));
  EXPECT_NE(Sampler(50, 0, 1).EpochOrder(3), Sampler(50, 0, 1).EpochOrder(4));
}

}  // namespace
}  // namespace tessera::trainer
