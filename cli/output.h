// Output formatting for tessctl: aligned text tables, JSON documents and CSV, plus
// the small summaries `tessctl wait` prints. Pure functions of their arguments (the
// current time and time zone come in through FormatContext); no RPCs, no I/O.
//
// JSON shapes (stable; scripts may depend on them):
//
//   job (`tessctl status -o json`; `tessctl jobs -o json` prints an array of these):
//     {
//       "id": 3,                        // integer
//       "name": "fmnist-vit-micro",
//       "state": "SUCCEEDED",           // QUEUED | SCHEDULED | RUNNING | SUCCEEDED
//                                       // | FAILED | CANCELLED | UNSPECIFIED
//       "reason": "",                   // why the job is in its state
//       "pending_reason": "",           // while QUEUED: why it cannot be placed
//       "attempt": 1,
//       "world_size": 2,
//       "created": "2024-05-01T12:00:00.5+00:00",  // RFC 3339, UTC
//       "created_unix_ms": 1714564800500,
//       "updated": "2024-05-01T12:02:31+00:00",
//       "updated_unix_ms": 1714564951000,
//       "ranks": [                      // ranks of the current attempt
//         {"rank": 0, "worker": "node-a", "slot": 0, "state": "exited",
//          "pid": 4242, "exit_code": 0, "signal": 0,
//          "param_hash": "9f1c...",     // null until the rank reported a result
//          "test_accuracy": 0.8412}     // fraction in [0, 1]; null until reported
//       ],
//       "spec": {"name": ..., "world_size": 2, "trainer": {"model": ..., ...}},
//       "spec_yaml": "name: ...\n"      // the spec text as submitted
//     }
//   `jobs -o json` leaves out "spec_yaml" to keep listings small.
//
//   worker (`tessctl workers -o json` prints an array of these):
//     {"name": "node-a", "hostname": "node-a.lan", "device_kind": "cpu",
//      "slots": 2, "slots_used": 1, "alive": true, "epoch": 7,
//      "last_seen": "2024-05-01T12:00:00+00:00", "last_seen_unix_ms": 1714564800000}
//
//   metric point (`tessctl metrics -o json` prints an array of these):
//     {"attempt": 1, "rank": 0, "step": 120, "name": "loss", "value": 0.6321,
//      "unix_ms": 1714564842000}
//
// In "spec", every field of tessera.v1.JobSpec appears under its proto name with
// its value (integers as JSON numbers, enums by name); `optional` fields that are
// unset are left out.
//
// Thread-safety: all functions are thread-compatible and share no state.
#ifndef TESSERA_CLI_OUTPUT_H_
#define TESSERA_CLI_OUTPUT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

enum class OutputFormat { kTable, kJson, kCsv };

// The clock reading and zone that tables show times against.
struct FormatContext {
  absl::Time now = absl::UnixEpoch();
  absl::TimeZone tz = absl::UTCTimeZone();
};

// Metric names the trainer reports and tessctl summarises.
inline constexpr char kLossMetric[] = "loss";
inline constexpr char kImagesPerSecMetric[] = "images_per_sec";
inline constexpr char kTestAccuracyMetric[] = "test_accuracy";

// "SUCCEEDED" for JOB_STATE_SUCCEEDED.
std::string JobStateName(tessera::v1::JobState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(tessera::v1::JobState state);

// "45s", "2m31s", "1h02m", "3d04h": two units at most.
std::string HumanDuration(absl::Duration d);
// "[00:42]" style clock for elapsed time: "mm:ss", or "h:mm:ss" from one hour on.
std::string FormatElapsed(absl::Duration d);
// 0.84123 -> "84.12%".
std::string FormatPercent(double fraction);

// A text table: columns padded to their widest cell, two spaces apart. Control
// characters in cells become spaces so one row is always one line.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> cells);
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // header first
};

std::string FormatJobsTable(const std::vector<tessera::v1::Job>& jobs,
                            const FormatContext& ctx);
std::string FormatJobStatus(const tessera::v1::Job& job, const FormatContext& ctx);
std::string FormatWorkersTable(const std::vector<tessera::v1::Worker>& workers,
                               const FormatContext& ctx);
std::string FormatMetricsTable(const std::vector<tessera::v1::MetricPoint>& points,
                               const FormatContext& ctx);
std::string FormatMetricsCsv(const std::vector<tessera::v1::MetricPoint>& points);

// Any message, field by field under proto names (see "spec" above).
nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message);
nlohmann::ordered_json JobToJson(const tessera::v1::Job& job,
                                 bool include_spec_yaml = true);
nlohmann::ordered_json WorkerToJson(const tessera::v1::Worker& worker);
nlohmann::ordered_json MetricPointToJson(const tessera::v1::MetricPoint& point);

// What `tessctl wait --progress` shows for one step of one attempt.
struct StepSummary {
  int64_t step = 0;
  int ranks = 0;              // ranks that reported a loss at this step
  double mean_loss = 0;       // mean of "loss" over those ranks
  double images_per_sec = 0;  // sum of "images_per_sec" over ranks at this step
  bool has_images_per_sec = false;
  double epoch = -1;  // max "epoch" (fractional) at this step; -1 if none
};

// The newest step of `attempt` with a loss among `points`, or nullopt. With
// `world_size` > 0, prefers the newest step every rank has reported, so a line
// never mixes a full step with one only some ranks reached yet.
std::optional<StepSummary> SummarizeLatestStep(
    const std::vector<tessera::v1::MetricPoint>& points, int32_t attempt,
    int32_t world_size = 0);

// Mean of the newest step's `name` values over ranks, or nullopt if none.
std::optional<double> LatestStepMean(const std::vector<tessera::v1::MetricPoint>& points,
                                     const std::string& name);

// "[00:42] RUNNING step 120  loss 0.6321  2 ranks  153.2 img/s", or, before any
// metrics, "[00:05] QUEUED: waiting for 2 free slots".
std::string FormatProgressLine(absl::Duration elapsed, const tessera::v1::Job& job,
                               const std::optional<StepSummary>& summary);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_OUTPUT_H_
