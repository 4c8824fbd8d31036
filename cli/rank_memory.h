// Each rank's device memory for `tessctl status`: the newest figures the
// trainer reported as metric rows (common/device_figures.h) in the job's
// current attempt. output.h shows them, one line per rank ("allocated 1.2
// GiB, peak 3.4 GiB, ...").
//
// Thread-safety: free functions, no state.
#ifndef TESSERA_CLI_RANK_MEMORY_H_
#define TESSERA_CLI_RANK_MEMORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client.h"
#include "common/device_figures.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// rank -> figure name -> its newest value.
using RankFigures = std::map<int32_t, std::map<std::string, double>>;

// The memory figures and how a rank's line names them, in the order shown.
struct MemoryFigure {
  std::string_view figure;
  const char* label;
};
inline constexpr MemoryFigure kMemoryFigures[] = {
    {kCudaAllocatedFigure, "allocated"}, {kCudaPeakAllocatedFigure, "peak"},
    {kCudaReservedFigure, "reserved"},   {kGpuMemoryUsedFigure, "GPU used"},
    {kPeakRssFigure, "peak RSS"},
};

// The newest value of each memory figure of each rank among `points` of
// attempt `attempt`.
RankFigures LatestRankMemory(const std::vector<tessera::v1::MetricPoint>& points,
                             int32_t attempt);

// Asks the coordinator for the job's memory figures (one FetchMetrics per
// figure). Empty when the job has no ranks, reported none, or the coordinator
// could not be asked: status shows everything else regardless.
RankFigures FetchRankMemory(CoordinatorClient& client, const tessera::v1::Job& job);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_RANK_MEMORY_H_
