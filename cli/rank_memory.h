// Each rank's device memory for `tessctl status`: the newest figures the
// trainer reported as metric rows (common/device_figures.h) in the job's
// current attempt, one line per rank ("allocated 1.2 GiB, peak 3.4 GiB, ...").
//
// Thread-safety: free functions, no state.
#ifndef TESSERA_CLI_RANK_MEMORY_H_
#define TESSERA_CLI_RANK_MEMORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/client.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// rank -> figure name -> its newest value.
using RankFigures = std::map<int32_t, std::map<std::string, double>>;

// The newest value of each memory figure of each rank among `points` of
// attempt `attempt`.
RankFigures LatestRankMemory(const std::vector<tessera::v1::MetricPoint>& points,
                             int32_t attempt);

// Asks the coordinator for the job's memory figures (one GetMetrics per
// figure). Empty when the job has no ranks, reported none, or the coordinator
// could not be asked: status shows everything else regardless.
RankFigures FetchRankMemory(CoordinatorClient& client, const tessera::v1::Job& job);

// "1.5 GiB": bytes in binary units, one decimal from KiB on.
std::string HumanBytes(double bytes);

// One rank's line: its figures in kDeviceFigures order, e.g. "allocated 1.2
// GiB, peak 3.4 GiB, reserved 4.0 GiB, GPU used 5.1 GiB" or "peak RSS 812.0 MiB".
std::string FormatRankMemory(const std::map<std::string, double>& figures);

// A RANK/MEMORY table after a blank line, or "" when no rank has figures.
std::string RankMemoryTable(const RankFigures& memory);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_RANK_MEMORY_H_
