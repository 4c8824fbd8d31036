#include "cli/rank_memory.h"

#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/device_figures.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::v1;

// The memory figures and how a rank's line names them, in the order shown.
struct MemoryFigure {
  std::string_view figure;
  const char* label;
};
constexpr MemoryFigure kMemoryFigures[] = {
    {kCudaAllocatedFigure, "allocated"}, {kCudaPeakAllocatedFigure, "peak"},
    {kCudaReservedFigure, "reserved"},   {kGpuMemoryUsedFigure, "GPU used"},
    {kPeakRssFigure, "peak RSS"},
};

}  // namespace

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

std::string HumanBytes(double bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrFormat("%.0f B", bytes);
  int unit = -1;
  while (bytes >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

std::string FormatRankMemory(const std::map<std::string, double>& figures) {
  std::vector<std::string> parts;
  for (const MemoryFigure& f : kMemoryFigures) {
    auto it = figures.find(std::string(f.figure));
    if (it != figures.end())
      parts.push_back(absl::StrCat(f.label, " ", HumanBytes(it->second)));
  }
  return absl::StrJoin(parts, ", ");
}

std::string RankMemoryTable(const RankFigures& memory) {
  if (memory.empty()) return "";
  Table table({"RANK", "MEMORY"});
  for (const auto& [rank, figures] : memory) {
    table.AddRow({absl::StrCat(rank), FormatRankMemory(figures)});
  }
  return absl::StrCat("\n", table.Render());
}

}  // namespace tessera::cli
