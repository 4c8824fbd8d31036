#include "cli/rank_memory.h"

#include <utility>

namespace tessera::cli {

namespace v1 = tessera::v1;

RankFigures LatestRankMemory(const std::vector<v1::MetricPoint>& points,
                             int32_t attempt) {
  RankFigures out;
  std::map<std::pair<int32_t, std::string>, int64_t> step_of;  // of the value kept
  for (const MemoryFigure& f : kMemoryFigures) {
    for (const v1::MetricPoint& p : points) {
      if (p.attempt() != attempt || p.name() != f.figure) continue;
      auto [it, fresh] = step_of.try_emplace({p.rank(), p.name()}, p.step());
      if (!fresh && p.step() < it->second) continue;
      it->second = p.step();
      out[p.rank()][p.name()] = p.value();
    }
  }
  return out;
}

RankFigures FetchRankMemory(CoordinatorClient& client, const v1::Job& job) {
  if (job.ranks_size() == 0) return {};
  std::vector<v1::MetricPoint> points;
  for (const MemoryFigure& f : kMemoryFigures) {
    absl::StatusOr<std::vector<v1::MetricPoint>> got =
        FetchMetrics(client, job.id(), -1, std::string(f.figure));
    if (!got.ok()) return {};
    points.insert(points.end(), got->begin(), got->end());
  }
  return LatestRankMemory(points, job.attempt());
}

}  // namespace tessera::cli
