// Output formatting for tessctl's sweep commands: the sweep list, one sweep's
// points, and the scaling report the coordinator computes (GetSweepReport).
// Pure functions of their arguments; no RPCs, no I/O. docs/tessctl.md documents
// the table, CSV and JSON shapes; the JSON and CSV ones are stable.
//
// Thread-safety: all functions are thread-compatible and share no state.
#ifndef TESSERA_CLI_SWEEP_OUTPUT_H_
#define TESSERA_CLI_SWEEP_OUTPUT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/output.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// "RUNNING" for SWEEP_STATE_RUNNING.
std::string SweepStateName(tessera::v1::SweepState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(tessera::v1::SweepState state);

// How many of a sweep's points are in which state.
struct PointCounts {
  int total = 0;
  int succeeded = 0;
  int failed = 0;   // FAILED or CANCELLED
  int running = 0;  // SCHEDULED or RUNNING
  int waiting = 0;  // not submitted yet, or QUEUED
  int done() const { return succeeded + failed; }
};
PointCounts CountPoints(const tessera::v1::Sweep& sweep);

// "point 3 (world 2, batch 64, strong, pack, repeat 1)", with "zero 1" after
// the batch size for a ZeRO stage other than 0.
std::string DescribePoint(const tessera::v1::SweepPoint& point);

// ID NAME STATE POINTS DONE FAILED AGE REASON, one row per sweep.
std::string FormatSweepsTable(const std::vector<tessera::v1::Sweep>& sweeps,
                              const FormatContext& ctx);
// id,name,state,points,succeeded,failed,created_unix_ms,updated_unix_ms,reason
std::string FormatSweepsCsv(const std::vector<tessera::v1::Sweep>& sweeps);

// The sweep's fields, then its points: INDEX WORLD BATCH ZERO SCALING SHAPE
// REPEAT JOB STATE.
std::string FormatSweepStatus(const tessera::v1::Sweep& sweep, const FormatContext& ctx);
// index,world_size,batch_size,scaling,shape,repeat,job_id,state,zero_stage
std::string FormatSweepPointsCsv(const tessera::v1::Sweep& sweep);

// One row per grid point: WORLD BATCH SCALING SHAPE ZERO RUNS EPOCH_TIME (mean ±
// std) SPEEDUP EFFICIENCY COMM ACCURACY MEMORY/RANK (the measured peak per
// rank and its source, "1.9 GiB (RSS)" or "3.0 GiB (CUDA)") OPTIMIZER/RANK
// GRADIENTS/RANK PARAMETERS/RANK (its breakdown: the bytes of optimizer state,
// of gradients and of parameters one rank holds, as the code counts them).
// Rows without a counted run, and byte figures no rank reported, show "-".
std::string FormatSweepReportTable(const tessera::v1::SweepReport& report);
// world_size,batch_size,scaling,shape,runs,epoch_time_mean_s,epoch_time_std_s,
// total_time_mean_s,images_per_sec,speedup,efficiency,baseline_world_size,
// comm_share,final_accuracy,job_ids (job ids separated by spaces),zero_stage,
// optimizer_state_bytes_per_rank,gradient_bytes_per_rank,
// peak_memory_bytes_per_rank,memory_source ("rss" or "cuda"),
// parameter_bytes_per_rank (the byte figures and the source empty when no rank
// reported them)
std::string FormatSweepReportCsv(const tessera::v1::SweepReport& report);

// `sweep status -o json` (detailed: with "points" and "spec_yaml") and the
// elements of `sweep list -o json` (without them).
nlohmann::ordered_json SweepToJson(const tessera::v1::Sweep& sweep, bool detailed);
nlohmann::ordered_json SweepPointToJson(const tessera::v1::SweepPoint& point);
// {"sweep_id": 4, "rows": [...]}; byte figures no rank reported, and the
// memory_source of a row without a measured peak, are null.
nlohmann::ordered_json SweepReportToJson(const tessera::v1::SweepReport& report);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_SWEEP_OUTPUT_H_
