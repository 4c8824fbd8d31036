// Metric downsampling for database retention (db_retention.h): which of a
// finished job's stored metric points to keep once its metrics are past
// --retain-metrics. A series is one metric name of one rank of one attempt.
// A series of at most `max_points` points, and every evaluation series
// (IsEvaluationMetric: test_accuracy, test_loss, ...), is kept whole; a longer
// one keeps `max_points` of its points spread evenly over it, its first and
// last included, so that a curve keeps its shape, its start and its end.
// Kept points are real stored points, never averages.
//
// Past the size budget (--db-max-size) retention cuts deeper, in two steps
// (SizeCut): first it thins a finished job's series to their last point,
// then it drops those too; neither touches a kept metric (IsKeptMetric: the
// evaluation results and every metric a report reads).
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COORDINATOR_STORE_METRIC_DOWNSAMPLING_H_
#define TESSERA_COORDINATOR_STORE_METRIC_DOWNSAMPLING_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace tessera {

// The key of one stored metric point (its job is implied).
struct MetricPointKey {
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string name;
  int64_t step = 0;

  bool operator==(const MetricPointKey&) const = default;
};

// Indices (ascending) of the points a series of `points` points keeps when
// it may keep `max_points`: all of them when points <= max_points; else
// max_points of them evenly spaced, the first (0) and the last (points - 1)
// included. max_points below 2 is taken as 2.
std::vector<size_t> PointsToKeep(size_t points, int max_points);

// The points of `keys` (one job's, in any order) that downsampling to
// `max_points` per series removes; evaluation series lose none.
std::vector<MetricPointKey> MetricPointsToDrop(std::vector<MetricPointKey> keys,
                                               int max_points);

// How far size retention cuts a finished job's metrics.
enum class SizeCut {
  kThin,  // each series keeps its last point (its newest step)
  kDrop,  // only kept metrics stay
};

// The newest step of each series (attempt, rank, name) of one job.
using SeriesEnds = std::map<std::tuple<int32_t, int32_t, std::string>, int64_t>;

// Whether `cut` keeps the point `key` of a job whose series end as `ends`
// says. A kept metric's points are always kept.
bool SizeCutKeeps(SizeCut cut, const MetricPointKey& key, const SeriesEnds& ends);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_METRIC_DOWNSAMPLING_H_
