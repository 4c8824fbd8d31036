// Downsampling of finished jobs' metrics (coordinator/store/metric_downsampling.h):
// at most N points per series, the first and the last kept, every evaluation
// point kept.
#include "coordinator/store/metric_downsampling.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using SeriesKey = std::tuple<int32_t, int32_t, std::string>;

// One job's points: `steps` points of each name for each of `ranks` ranks.
std::vector<MetricPointKey> Points(const std::vector<std::string>& names, int ranks,
                                   int64_t steps, int64_t every = 1) {
  std::vector<MetricPointKey> keys;
  for (int rank = 0; rank < ranks; ++rank) {
    for (const std::string& name : names) {
      for (int64_t i = 1; i <= steps; ++i) keys.push_back({0, rank, name, i * every});
    }
  }
  return keys;
}

// What is left of `keys` once `drop` is removed, per series, by step.
std::map<SeriesKey, std::vector<int64_t>> Kept(const std::vector<MetricPointKey>& keys,
                                               const std::vector<MetricPointKey>& drop) {
  std::set<std::tuple<int32_t, int32_t, std::string, int64_t>> dropped;
  for (const MetricPointKey& k : drop)
    dropped.insert({k.attempt, k.rank, k.name, k.step});
  std::map<SeriesKey, std::vector<int64_t>> kept;
  for (const MetricPointKey& k : keys) {
    if (dropped.count({k.attempt, k.rank, k.name, k.step}) == 0) {
      kept[{k.attempt, k.rank, k.name}].push_back(k.step);
    }
  }
  for (auto& [series, steps] : kept) std::sort(steps.begin(), steps.end());
  return kept;
}

TEST(MetricDownsamplingTest, KeepsAtMostMaxPointsPerSeriesWithFirstAndLast) {
  for (size_t points : {3u, 499u, 500u, 501u, 1000u, 12345u, 2000000u}) {
    std::vector<size_t> kept = PointsToKeep(points, 500);
    EXPECT_EQ(kept.size(), std::min<size_t>(points, 500)) << points;
    EXPECT_EQ(kept.front(), 0u) << points;
    EXPECT_EQ(kept.back(), points - 1) << points;
    EXPECT_TRUE(std::adjacent_find(kept.begin(), kept.end(), std::greater_equal<>()) ==
                kept.end())
        << points << ": indices not strictly ascending";
  }
}

TEST(MetricDownsamplingTest, SpreadsKeptPointsEvenly) {
  std::vector<size_t> kept = PointsToKeep(10001, 101);
  ASSERT_EQ(kept.size(), 101u);
  for (size_t k = 0; k < kept.size(); ++k) EXPECT_EQ(kept[k], k * 100);
}

TEST(MetricDownsamplingTest, KeepsEveryEvaluationPoint) {
  std::vector<MetricPointKey> keys =
      Points({"loss", "images_per_sec", "test_accuracy", "test_loss"}, 2, 3000);
  std::map<SeriesKey, std::vector<int64_t>> kept =
      Kept(keys, MetricPointsToDrop(keys, 200));
  ASSERT_EQ(kept.size(), 8u);
  for (const auto& [series, steps] : kept) {
    const std::string& name = std::get<2>(series);
    if (name == "test_accuracy" || name == "test_loss") {
      EXPECT_EQ(steps.size(), 3000u) << name;
    } else {
      EXPECT_EQ(steps.size(), 200u) << name;
      EXPECT_EQ(steps.front(), 1) << name;
      EXPECT_EQ(steps.back(), 3000) << name;
    }
  }
}

TEST(MetricDownsamplingTest, SeriesAreSeparateByRankAttemptAndName) {
  std::vector<MetricPointKey> keys = Points({"loss"}, 1, 50);
  for (MetricPointKey k : Points({"loss"}, 1, 1000)) {
    k.attempt = 1;  // a second attempt's long series
    keys.push_back(k);
  }
  std::map<SeriesKey, std::vector<int64_t>> kept =
      Kept(keys, MetricPointsToDrop(keys, 100));
  EXPECT_EQ(kept[SeriesKey(0, 0, "loss")].size(), 50u);
  EXPECT_EQ(kept[SeriesKey(1, 0, "loss")].size(), 100u);
}

TEST(MetricDownsamplingTest, ShortSeriesLoseNothing) {
  std::vector<MetricPointKey> keys = Points({"loss", "epoch_seconds"}, 4, 100, 10);
  EXPECT_TRUE(MetricPointsToDrop(keys, 100).empty());
}

// Size retention: thinning keeps each series' newest point (per attempt and
// rank), dropping none; a kept metric (an evaluation result, or one a sweep
// or search report reads) keeps every point either way.
TEST(MetricDownsamplingTest, SizeCutsKeepTheLastPointAndEveryPointOfAKeptMetric) {
  const SeriesEnds ends = {{{0, 0, "lr"}, 30}, {{1, 0, "lr"}, 20}, {{0, 1, "lr"}, 10}};
  for (const char* kept : {"test_accuracy", "val_loss", "eval_top1", "images_per_sec",
                           "time_comm_ms", "epoch_seconds", "loss", "total_steps",
                           "peak_rss_bytes", "optimizer_state_bytes"}) {
    for (SizeCut cut : {SizeCut::kThin, SizeCut::kDrop}) {
      EXPECT_TRUE(SizeCutKeeps(cut, {0, 0, kept, 5}, ends)) << kept;
    }
  }
  EXPECT_TRUE(SizeCutKeeps(SizeCut::kThin, {0, 0, "lr", 30}, ends));
  EXPECT_FALSE(SizeCutKeeps(SizeCut::kThin, {0, 0, "lr", 20}, ends));
  EXPECT_TRUE(SizeCutKeeps(SizeCut::kThin, {1, 0, "lr", 20}, ends));  // attempt 1's
  EXPECT_FALSE(
      SizeCutKeeps(SizeCut::kThin, {0, 1, "lr", 20}, ends));  // rank 1 ends at 10
  EXPECT_FALSE(SizeCutKeeps(SizeCut::kDrop, {0, 0, "lr", 30}, ends));
  EXPECT_FALSE(SizeCutKeeps(SizeCut::kThin, {0, 0, "time_data_ms", 30}, ends));
}

}  // namespace
}  // namespace tessera
