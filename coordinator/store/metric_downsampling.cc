#include "coordinator/store/metric_downsampling.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "common/metric_names.h"

namespace tessera {

std::vector<size_t> PointsToKeep(size_t points, int max_points) {
  const size_t keep = static_cast<size_t>(std::max(max_points, 2));
  std::vector<size_t> indices;
  if (points <= keep) {
    indices.resize(points);
    for (size_t i = 0; i < points; ++i) indices[i] = i;
    return indices;
  }
  // Point k of `keep` sits at round(k * (points - 1) / (keep - 1)); with
  // points > keep the spacing is above 1, so the indices are distinct.
  indices.reserve(keep);
  const size_t last = points - 1;
  const size_t gaps = keep - 1;
  for (size_t k = 0; k < keep; ++k) {
    indices.push_back((k * last * 2 + gaps) / (gaps * 2));
  }
  return indices;
}

std::vector<MetricPointKey> MetricPointsToDrop(std::vector<MetricPointKey> keys,
                                               int max_points) {
  auto series_then_step = [](const MetricPointKey& a, const MetricPointKey& b) {
    return std::tie(a.attempt, a.rank, a.name, a.step) <
           std::tie(b.attempt, b.rank, b.name, b.step);
  };
  std::sort(keys.begin(), keys.end(), series_then_step);
  std::vector<MetricPointKey> drop;
  size_t begin = 0;
  while (begin < keys.size()) {
    size_t end = begin + 1;
    while (end < keys.size() && keys[end].attempt == keys[begin].attempt &&
           keys[end].rank == keys[begin].rank && keys[end].name == keys[begin].name) {
      ++end;
    }
    if (!IsEvaluationMetric(keys[begin].name)) {
      std::vector<size_t> kept = PointsToKeep(end - begin, max_points);
      size_t next_kept = 0;
      for (size_t i = 0; i < end - begin; ++i) {
        if (next_kept < kept.size() && kept[next_kept] == i) {
          ++next_kept;
        } else {
          drop.push_back(std::move(keys[begin + i]));
        }
      }
    }
    begin = end;
  }
  return drop;
}

bool SizeCutKeeps(SizeCut cut, const MetricPointKey& key, const SeriesEnds& ends) {
  if (IsKeptMetric(key.name)) return true;
  if (cut != SizeCut::kThin) return false;
  const auto end = ends.find({key.attempt, key.rank, key.name});
  return end != ends.end() && end->second == key.step;
}

}  // namespace tessera
