#include "worker/trainer/data/distributed_sampler.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

DistributedSampler MakeSampler(int64_t n, int rank, int world, int64_t seed,
                               bool shuffle = true, bool keep_tail = false) {
  DistributedSamplerOptions options;
  options.dataset_size = n;
  options.rank = rank;
  options.world_size = world;
  options.seed = seed;
  options.shuffle = shuffle;
  options.keep_tail = keep_tail;
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(options);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *sampler;
}

TEST(DistributedSamplerTest, ShardsAreDisjointEqualAndCoverAllButTheTail) {
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{100}, int64_t{103}}) {
    for (int world = 1; world <= 4; ++world) {
      for (const int64_t epoch : {int64_t{0}, int64_t{3}}) {
        std::set<int64_t> seen;
        for (int rank = 0; rank < world; ++rank) {
          const DistributedSampler sampler = MakeSampler(n, rank, world, 42);
          const std::vector<int64_t> shard = sampler.EpochIndices(epoch);
          EXPECT_EQ(static_cast<int64_t>(shard.size()), n / world)
              << "n=" << n << " world=" << world << " rank=" << rank;
          EXPECT_EQ(sampler.num_samples(), n / world);
          for (const int64_t index : shard) {
            EXPECT_GE(index, 0);
            EXPECT_LT(index, n);
            EXPECT_TRUE(seen.insert(index).second)
                << "index " << index << " in two shards (n=" << n << ", world=" << world
                << ")";
          }
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), (n / world) * world);
      }
    }
  }
}

TEST(DistributedSamplerTest, ShardDoesNotDependOnCallOrderOrOtherRanks) {
  // Rank 2 asked first for epoch 5, then 1 ...
  const DistributedSampler late = MakeSampler(1000, 2, 4, 9);
  const std::vector<int64_t> late_epoch5 = late.EpochIndices(5);
  const std::vector<int64_t> late_epoch1 = late.EpochIndices(1);
  // ... and by a fresh sampler created after the other ranks' samplers ran.
  for (int rank = 0; rank < 4; ++rank) MakeSampler(1000, rank, 4, 9).EpochIndices(1);
  const DistributedSampler early = MakeSampler(1000, 2, 4, 9);
  EXPECT_EQ(early.EpochIndices(1), late_epoch1);
  EXPECT_EQ(early.EpochIndices(5), late_epoch5);
}

TEST(DistributedSamplerTest, EachEpochUsesADifferentOrder) {
  const DistributedSampler sampler = MakeSampler(500, 0, 2, 1);
  EXPECT_NE(sampler.EpochIndices(0), sampler.EpochIndices(1));
}

TEST(DistributedSamplerTest, OrderFollowsSeedPlusEpoch) {
  EXPECT_EQ(MakeSampler(500, 1, 2, 10).EpochIndices(2),
            MakeSampler(500, 1, 2, 11).EpochIndices(1));
  EXPECT_NE(MakeSampler(500, 1, 2, 10).EpochIndices(0),
            MakeSampler(500, 1, 2, 11).EpochIndices(0));
}

TEST(DistributedSamplerTest, ShuffledShardIsNotSortedOrder) {
  std::vector<int64_t> shard = MakeSampler(200, 0, 1, 3).EpochIndices(0);
  EXPECT_FALSE(std::is_sorted(shard.begin(), shard.end()));
  std::sort(shard.begin(), shard.end());
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(shard[static_cast<size_t>(i)], i);
}

TEST(DistributedSamplerTest, EvaluationShardsCoverEverySampleExactlyOnce) {
  for (int world = 1; world <= 4; ++world) {
    std::vector<int> hits(10);
    for (int rank = 0; rank < world; ++rank) {
      const DistributedSampler sampler =
          MakeSampler(10, rank, world, 0, /*shuffle=*/false, /*keep_tail=*/true);
      const std::vector<int64_t> shard = sampler.EpochIndices(0);
      EXPECT_EQ(static_cast<int64_t>(shard.size()), sampler.num_samples());
      EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
      for (const int64_t index : shard) ++hits[static_cast<size_t>(index)];
    }
    for (const int h : hits) EXPECT_EQ(h, 1) << "world " << world;
  }
}

TEST(DistributedSamplerTest, RejectsRankOutsideTheWorld) {
  DistributedSamplerOptions options;
  options.dataset_size = 10;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_EQ(DistributedSampler::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WeakScalingSubsetSizeTest, GrowsWithTheWorldSoEachRankKeepsItsShare) {
  // The paper's setting: 10% per GPU, 1 GPU uses 10%, 8 GPUs 80%.
  for (int world = 1; world <= 8; ++world) {
    EXPECT_EQ(WeakScalingSubsetSize(50'000, 0.1, world), 5'000 * world) << world;
  }
  // Capped at the whole dataset once world * fraction reaches 1.
  EXPECT_EQ(WeakScalingSubsetSize(50'000, 0.1, 10), 50'000);
  EXPECT_EQ(WeakScalingSubsetSize(50'000, 0.1, 16), 50'000);
  EXPECT_EQ(WeakScalingSubsetSize(50'000, 1.0, 1), 50'000);
  // Whole numbers stay whole despite binary fractions (0.29 * 100 = 28.99...).
  EXPECT_EQ(WeakScalingSubsetSize(100, 0.29, 3), 87);
}

// Shards of every rank for `epoch`, with the given subset (unset: strong).
std::vector<std::vector<int64_t>> AllShards(int64_t n, int world, int64_t epoch,
                                            std::optional<int64_t> subset) {
  std::vector<std::vector<int64_t>> shards;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSamplerOptions options;
    options.dataset_size = n;
    options.rank = rank;
    options.world_size = world;
    options.seed = 17;
    options.subset_size = subset;
    absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(options);
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    shards.push_back(sampler->EpochIndices(epoch));
    EXPECT_EQ(static_cast<int64_t>(shards.back().size()), sampler->num_samples());
  }
  return shards;
}

// The union of `shards`; fails the test if any index is in two of them.
std::set<int64_t> DisjointUnion(const std::vector<std::vector<int64_t>>& shards) {
  std::set<int64_t> all;
  for (const std::vector<int64_t>& shard : shards) {
    for (const int64_t index : shard) {
      EXPECT_TRUE(all.insert(index).second) << "index " << index << " in two shards";
    }
  }
  return all;
}

TEST(DistributedSamplerTest, StrongScalingSplitsTheWholeDatasetAtEveryWorldSize) {
  constexpr int64_t kN = 1000;
  for (int world = 1; world <= 8; ++world) {
    const auto shards = AllShards(kN, world, 0, std::nullopt);
    for (const auto& shard : shards)
      EXPECT_EQ(static_cast<int64_t>(shard.size()), kN / world);
    EXPECT_EQ(static_cast<int64_t>(DisjointUnion(shards).size()), (kN / world) * world);
  }
}

TEST(DistributedSamplerTest, WeakScalingGivesEveryRankTheSameShareOfAGrowingSubset) {
  constexpr int64_t kN = 1000;
  std::set<int64_t> previous;
  for (int world = 1; world <= 8; ++world) {
    const int64_t subset = WeakScalingSubsetSize(kN, 0.1, world);
    const auto epoch0 = AllShards(kN, world, 0, subset);
    const auto epoch1 = AllShards(kN, world, 1, subset);
    for (const auto& shard : epoch0) {
      EXPECT_EQ(shard.size(), 100u) << "world " << world;
    }
    const std::set<int64_t> used = DisjointUnion(epoch0);
    EXPECT_EQ(static_cast<int64_t>(used.size()), 100 * world);
    // Every epoch draws from the same subset, in another order.
    EXPECT_EQ(DisjointUnion(epoch1), used) << "world " << world;
    EXPECT_NE(epoch0, epoch1);
    // The subset is seeded, not the first indices, and a larger world's subset
    // contains the smaller one's.
    EXPECT_NE(*used.rbegin(), 100 * world - 1);
    EXPECT_TRUE(std::includes(used.begin(), used.end(), previous.begin(), previous.end()))
        << "world " << world;
    previous = used;
  }
}

TEST(DistributedSamplerTest, WeakSubsetIsTheSameOnEveryRankWhateverTheOrderOfCreation) {
  // Rank 2's view, created alone, matches its shard in the all-ranks run.
  const auto together = AllShards(500, 4, 3, 200);
  DistributedSamplerOptions options;
  options.dataset_size = 500;
  options.rank = 2;
  options.world_size = 4;
  options.seed = 17;
  options.subset_size = 200;
  EXPECT_EQ(DistributedSampler::Create(options)->EpochIndices(3), together[2]);
}

TEST(DistributedSamplerTest, RejectsASubsetLargerThanTheDataset) {
  DistributedSamplerOptions options;
  options.dataset_size = 10;
  options.subset_size = 11;
  EXPECT_EQ(DistributedSampler::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SeededPermutationTest, IsAPermutation) {
  std::vector<int64_t> order = SeededPermutation(1000, 77);
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

}  // namespace
}  // namespace tessera::trainer
