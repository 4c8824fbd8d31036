#include "worker/trainer/data/global_sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::trainer::data {
namespace {

GlobalSampler Make(int64_t n, int world, int rank, bool drop = true) {
  GlobalSamplerOptions o;
  o.num_samples = n;
  o.world_size = world;
  o.rank = rank;
  o.seed = 11;
  o.drop_remainder = drop;
  auto s = GlobalSampler::Create(o);
  EXPECT_TRUE(s.ok());
  return *s;
}

TEST(GlobalSamplerTest, RanksGetEqualDisjointSharesOfANonDivisibleCount) {
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    const GlobalSampler s = Make(103, 4, r);
    EXPECT_EQ(s.RankCount(), 25);
    for (int64_t id : s.RankSamples(2)) EXPECT_TRUE(seen.insert(id).second) << id;
  }
  EXPECT_EQ(seen.size(), 100u);  // the last 3 positions are dropped
}

TEST(GlobalSamplerTest, EveryRankSeesTheSameEpochOrderAndEpochsDiffer) {
  const std::vector<int64_t> a = Make(50, 4, 0).EpochOrder(3);
  EXPECT_EQ(a, Make(50, 4, 3).EpochOrder(3));
  EXPECT_EQ(a, Make(50, 2, 1).EpochOrder(3));
  EXPECT_NE(a, Make(50, 4, 0).EpochOrder(4));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  // Rank r takes positions r, r + W, ...
  const std::vector<int64_t> rank1 = Make(50, 4, 1).RankSamples(3);
  for (size_t j = 0; j < rank1.size(); ++j) EXPECT_EQ(rank1[j], a[1 + 4 * j]);
}

TEST(GlobalSamplerTest, EvaluationVisitsEverySampleOnce) {
  std::multiset<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    GlobalSamplerOptions o;
    o.num_samples = 10;
    o.world_size = 4;
    o.rank = r;
    o.shuffle = false;
    o.drop_remainder = false;
    auto s = GlobalSampler::Create(o);
    EXPECT_EQ(s->RankCount(), r < 2 ? 3 : 2);
    for (int64_t id : s->RankSamples(0)) seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
}

// The global order a run consumes from `start`: step k's samples of every
// rank, rank 0's first, position by position.
std::vector<std::vector<int64_t>> GlobalBatches(int64_t n, int world, int per_rank_batch,
                                                int64_t epoch, int64_t start) {
  std::vector<std::vector<int64_t>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(Make(n, world, r).RankSamples(epoch, start));
  std::vector<std::vector<int64_t>> batches;
  const size_t count = ranks[0].size();
  for (size_t b = 0; b * per_rank_batch < count; ++b) {
    std::vector<int64_t> batch;
    for (size_t j = b * per_rank_batch; j < std::min(count, (b + 1) * per_rank_batch);
         ++j) {
      for (int r = 0; r < world; ++r) batch.push_back(ranks[r][j]);
    }
    batches.push_back(batch);
  }
  return batches;
}

TEST(GlobalSamplerTest, ResumeAtWorldSizeTwoContinuesTheWorldSizeOneOrderExactly) {
  const int64_t n = 101;
  const int64_t epoch = 5;
  // World size 1, batch 8: stopped after 3 steps, at global position 24.
  const GlobalSampler one = Make(n, 1, 0);
  const std::vector<int64_t> order = one.EpochOrder(epoch);
  const int64_t stopped = one.PositionAfter(0, 3 * 8);
  ASSERT_EQ(stopped, 24);
  // Resumed at world size 2, batch 4 per rank (the same global batch of 8):
  // each global batch is the next 8 positions of the order, in order.
  const auto resumed = GlobalBatches(n, 2, 4, epoch, stopped);
  int64_t position = stopped;
  for (const std::vector<int64_t>& batch : resumed) {
    for (int64_t id : batch) EXPECT_EQ(id, order[position++]);
  }
  // (101 - 24) = 77 positions: 38 per rank; the last one is dropped.
  EXPECT_EQ(position, 100);
  EXPECT_EQ(Make(n, 2, 0).PositionAfter(stopped, 38), n);
}

TEST(GlobalSamplerTest, ResumeFromWorldSizeFourAtTwoKeepsEveryGlobalBatch) {
  const int64_t n = 96;
  // World size 4 with 2 per rank and world size 2 with 4 per rank both take
  // global batches of 8: after 5 steps of the first, the second's batches are
  // the first's remaining ones as sets.
  const auto uninterrupted = GlobalBatches(n, 4, 2, 1, 0);
  const GlobalSampler four = Make(n, 4, 0);
  const int64_t stopped = four.PositionAfter(0, 5 * 2);
  ASSERT_EQ(stopped, 40);
  const auto resumed = GlobalBatches(n, 2, 4, 1, stopped);
  ASSERT_EQ(resumed.size() + 5, uninterrupted.size());
  for (size_t b = 0; b < resumed.size(); ++b) {
    EXPECT_EQ(
        std::multiset<int64_t>(resumed[b].begin(), resumed[b].end()),
        std::multiset<int64_t>(uninterrupted[b + 5].begin(), uninterrupted[b + 5].end()))
        << "global batch " << b + 5;
  }
}

TEST(GlobalSamplerTest, RejectsBadRanks) {
  GlobalSamplerOptions o;
  o.num_samples = 10;
  o.world_size = 2;
  o.rank = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalSampler::Create(o).status()));
  o.rank = 0;
  o.num_samples = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalSampler::Create(o).status()));
}

TEST(AssignShardsTest, EqualCountsDisjointShardsSameOnEveryRank) {
  const std::vector<int64_t> counts = {100, 100, 100, 100, 100, 37, 100};
  std::set<int> shards;
  int64_t per_rank = -1;
  for (int r = 0; r < 3; ++r) {
    auto mine = AssignShards(counts, 5, 2, 3, r);
    ASSERT_TRUE(mine.ok()) << mine.status();
    if (per_rank < 0) per_rank = mine->samples;
    EXPECT_EQ(mine->samples, per_rank);
    int64_t held = 0;
    for (int s : mine->shards) {
      EXPECT_TRUE(shards.insert(s).second);
      held += counts[s];
    }
    EXPECT_EQ(held - mine->dropped, per_rank);
    auto again = AssignShards(counts, 5, 2, 3, r);
    EXPECT_EQ(again->shards, mine->shards);
  }
  EXPECT_EQ(shards.size(), counts.size());
  EXPECT_NE(AssignShards(counts, 5, 3, 3, 0)->shards,
            AssignShards(counts, 5, 2, 3, 0)->shards);
  auto resumed = AssignShards(counts, 5, 2, 3, 1, /*start_position=*/30);
  EXPECT_EQ(resumed->skip, 10);
  EXPECT_EQ(resumed->samples, per_rank - 10);
  EXPECT_TRUE(absl::IsInvalidArgument(AssignShards({10, 10}, 5, 0, 3, 0).status()));
}

}  // namespace
}  // namespace tessera::trainer::data
