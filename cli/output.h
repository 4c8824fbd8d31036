// Output formatting for tessctl's job commands: aligned text tables, JSON
// documents and CSV. Pure functions of their arguments (the current time and time
// zone come in through FormatContext); no RPCs, no I/O. Sweeps: sweep_output.h;
// progress lines: progress.h. docs/tessctl.md documents every shape.
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
//       "sweep_id": 4,                  // null unless the job is a point of a sweep
//       "sweep_point": 2,               // its point index; null as above
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
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/rank_memory.h"
#include "common/job_state.h"
#include "google/protobuf/message.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

enum class OutputFormat { kTable, kJson, kCsv };

// The clock reading and zone that tables show times against.
struct FormatContext {
  absl::Time now = absl::UnixEpoch();
  absl::TimeZone tz = absl::UTCTimeZone();
};

// Control characters become spaces, so that a value stays on one line.
std::string Sanitize(std::string text);
// Columns `text` takes on a terminal: UTF-8 code points, not bytes.
size_t DisplayWidth(absl::string_view text);
// `text` cut to at most `width` columns, ending in "..." when cut.
std::string TruncateToWidth(const std::string& text, size_t width);
// One CSV field: quoted (RFC 4180) when it holds a comma, quote or line break.
std::string CsvField(absl::string_view value);
// Shortest text that reads back as the same double ("0.1", not "0.1000000001").
std::string ExactDouble(double value);

// RFC 3339 in UTC, e.g. "2024-05-01T12:00:00.5+00:00".
std::string Rfc3339(int64_t unix_ms);
// How long before ctx.now, e.g. "2m31s"; "-" for 0.
std::string Ago(int64_t unix_ms, const FormatContext& ctx);
// "2024-05-01 14:00:00 CEST (2m31s ago)" in ctx.tz; "-" for 0.
std::string LocalTime(int64_t unix_ms, const FormatContext& ctx);
// "1.5 GiB": bytes in binary units, one decimal from KiB on.
std::string HumanBytes(double bytes);

// "45s", "2m31s", "1h02m", "3d04h": two units at most.
std::string HumanDuration(absl::Duration d);
// "[00:42]" style clock for elapsed time: "mm:ss", or "h:mm:ss" from one hour on.
std::string FormatElapsed(absl::Duration d);
// 0.84123 -> "84.12%".
std::string FormatPercent(double fraction);

// A text table: columns padded to their widest cell (in columns, so "±" counts
// once), two spaces apart. Control characters in cells become spaces so one row
// is always one line.
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
// id,name,state,world_size,attempt,created_unix_ms,updated_unix_ms,sweep_id,reason
std::string FormatJobsCsv(const std::vector<tessera::v1::Job>& jobs);
// `memory`: each rank's device memory (rank_memory.h), shown after the ranks.
std::string FormatJobStatus(const tessera::v1::Job& job, const FormatContext& ctx,
                            const RankFigures& memory = {});
// One rank's memory line: its figures in kMemoryFigures order, e.g. "allocated
// 1.2 GiB, peak 3.4 GiB, reserved 4.0 GiB, GPU used 5.1 GiB" or "peak RSS 812.0
// MiB".
std::string FormatRankMemory(const std::map<std::string, double>& figures);
// A RANK/MEMORY table after a blank line, or "" when no rank has figures.
std::string RankMemoryTable(const RankFigures& memory);
std::string FormatWorkersTable(const std::vector<tessera::v1::Worker>& workers,
                               const FormatContext& ctx);
// name,hostname,device_kind,slots,slots_used,alive,last_seen_unix_ms
std::string FormatWorkersCsv(const std::vector<tessera::v1::Worker>& workers);
// `tessctl share`: one line per user (usage, factor, running ranks, queued jobs).
std::string FormatShareTable(const std::vector<tessera::v1::UserShare>& users);
std::string FormatShareCsv(const std::vector<tessera::v1::UserShare>& users);
std::string FormatMetricsTable(const std::vector<tessera::v1::MetricPoint>& points,
                               const FormatContext& ctx);
// attempt,rank,step,name,value,unix_ms
std::string FormatMetricsCsv(const std::vector<tessera::v1::MetricPoint>& points);

// Any message, field by field under proto names (see "spec" above).
nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message);
nlohmann::ordered_json JobToJson(const tessera::v1::Job& job,
                                 bool include_spec_yaml = true);
nlohmann::ordered_json WorkerToJson(const tessera::v1::Worker& worker);
nlohmann::ordered_json UserShareToJson(const tessera::v1::UserShare& user);
nlohmann::ordered_json MetricPointToJson(const tessera::v1::MetricPoint& point);

// Mean of the newest step's `name` values over ranks, or nullopt if none.
std::optional<double> LatestStepMean(const std::vector<tessera::v1::MetricPoint>& points,
                                     const std::string& name);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_OUTPUT_H_
