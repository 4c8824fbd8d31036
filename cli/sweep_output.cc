#include "cli/sweep_output.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxReasonCellChars = 72;
// What a point that has no job yet shows as its state.
constexpr char kPendingPoint[] = "PENDING";

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

std::string PointState(const v1::SweepPoint& point) {
  if (point.job_id() == 0 || point.state() == v1::JOB_STATE_UNSPECIFIED) {
    return kPendingPoint;
  }
  return JobStateName(point.state());
}

std::string EpochTimeCell(const v1::SweepReportRow& row) {
  if (row.runs() <= 0) return "-";
  if (row.runs() == 1) return absl::StrFormat("%.2f s", row.epoch_time_mean_s());
  return absl::StrFormat("%.2f ± %.2f s", row.epoch_time_mean_s(),
                         row.epoch_time_std_s());
}

std::string RatioCell(const v1::SweepReportRow& row, double value, const char* format) {
  if (row.runs() <= 0 || value <= 0) return "-";
  return absl::StrFormat(format, value);
}

// Bytes per rank in binary units; "-" when no rank reported the figure.
std::string BytesCell(bool reported, double bytes) {
  return reported ? HumanBytes(bytes) : "-";
}

// The measured peak per rank and what measured it: "1.9 GiB (RSS)" or
// "3.0 GiB (CUDA)"; "-" when no rank reported one.
std::string PeakMemoryCell(const v1::SweepReportRow& row) {
  if (!row.has_peak_memory_bytes_per_rank()) return "-";
  const std::string source = absl::AsciiStrToUpper(row.memory_source());
  return source.empty() ? HumanBytes(row.peak_memory_bytes_per_rank())
                        : absl::StrCat(HumanBytes(row.peak_memory_bytes_per_rank()), " (",
                                       source, ")");
}

// The exact figure, or an empty field when no rank reported it.
std::string BytesCsvField(bool reported, double bytes) {
  return reported ? ExactDouble(bytes) : "";
}

// The figure, or null when no rank reported it.
json BytesJson(bool reported, double bytes) {
  return reported ? json(bytes) : json(nullptr);
}

}  // namespace

std::string SweepStateName(v1::SweepState state) {
  std::string name = v1::SweepState_Name(state);
  constexpr absl::string_view kPrefix = "SWEEP_STATE_";
  if (absl::StartsWith(name, kPrefix)) name.erase(0, kPrefix.size());
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

bool IsTerminal(v1::SweepState state) {
  return state == v1::SWEEP_STATE_SUCCEEDED || state == v1::SWEEP_STATE_FAILED ||
         state == v1::SWEEP_STATE_CANCELLED;
}

PointCounts CountPoints(const v1::Sweep& sweep) {
  PointCounts counts;
  for (const v1::SweepPoint& p : sweep.points()) {
    ++counts.total;
    switch (p.job_id() == 0 ? v1::JOB_STATE_UNSPECIFIED : p.state()) {
      case v1::JOB_STATE_SUCCEEDED:
        ++counts.succeeded;
        break;
      case v1::JOB_STATE_FAILED:
      case v1::JOB_STATE_CANCELLED:
        ++counts.failed;
        break;
      case v1::JOB_STATE_SCHEDULED:
      case v1::JOB_STATE_RUNNING:
        ++counts.running;
        break;
      default:
        ++counts.waiting;
        break;
    }
  }
  return counts;
}

std::string DescribePoint(const v1::SweepPoint& point) {
  std::vector<std::string> parts = {absl::StrCat("world ", point.world_size()),
                                    absl::StrCat("batch ", point.batch_size())};
  if (point.zero_stage() != 0) parts.push_back(absl::StrCat("zero ", point.zero_stage()));
  if (!point.scaling().empty()) parts.push_back(point.scaling());
  if (!point.shape().empty()) parts.push_back(point.shape());
  parts.push_back(absl::StrCat("repeat ", point.repeat()));
  return absl::StrCat("point ", point.index(), " (", absl::StrJoin(parts, ", "), ")");
}

std::string FormatSweepsTable(const std::vector<v1::Sweep>& sweeps,
                              const FormatContext& ctx) {
  Table table({"ID", "NAME", "STATE", "POINTS", "DONE", "FAILED", "AGE", "REASON"});
  for (const v1::Sweep& sweep : sweeps) {
    const PointCounts counts = CountPoints(sweep);
    table.AddRow({absl::StrCat(sweep.id()), sweep.name(), SweepStateName(sweep.state()),
                  absl::StrCat(counts.total), absl::StrCat(counts.done()),
                  absl::StrCat(counts.failed), Ago(sweep.created_unix_ms(), ctx),
                  TruncateToWidth(OrDash(sweep.reason()), kMaxReasonCellChars)});
  }
  return table.Render();
}

std::string FormatSweepsCsv(const std::vector<v1::Sweep>& sweeps) {
  std::string out =
      "id,name,state,points,succeeded,failed,created_unix_ms,updated_unix_ms,reason\n";
  for (const v1::Sweep& sweep : sweeps) {
    const PointCounts counts = CountPoints(sweep);
    absl::StrAppend(&out, sweep.id(), ",", CsvField(sweep.name()), ",",
                    SweepStateName(sweep.state()), ",", counts.total, ",",
                    counts.succeeded, ",", counts.failed, ",", sweep.created_unix_ms(),
                    ",", sweep.updated_unix_ms(), ",", CsvField(sweep.reason()), "\n");
  }
  return out;
}

std::string FormatSweepStatus(const v1::Sweep& sweep, const FormatContext& ctx) {
  const PointCounts counts = CountPoints(sweep);
  Table fields({"SWEEP", absl::StrCat(sweep.id())});
  fields.AddRow({"NAME", sweep.name()});
  fields.AddRow({"STATE", SweepStateName(sweep.state())});
  if (!sweep.reason().empty()) fields.AddRow({"REASON", sweep.reason()});
  fields.AddRow({"POINTS", absl::StrFormat("%d: %d succeeded, %d failed, %d running, "
                                           "%d waiting",
                                           counts.total, counts.succeeded, counts.failed,
                                           counts.running, counts.waiting)});
  const int32_t repeats = std::max(sweep.spec().repeats(), 1);
  const int32_t parallel = std::max(sweep.spec().max_parallel(), 1);
  fields.AddRow({"REPEATS", absl::StrCat(repeats)});
  fields.AddRow({"PARALLEL", absl::StrCat(parallel)});
  fields.AddRow({"CREATED", LocalTime(sweep.created_unix_ms(), ctx)});
  fields.AddRow({"UPDATED", LocalTime(sweep.updated_unix_ms(), ctx)});
  std::string out = fields.Render();
  if (sweep.points_size() == 0) return out;

  Table points(
      {"INDEX", "WORLD", "BATCH", "ZERO", "SCALING", "SHAPE", "REPEAT", "JOB", "STATE"});
  for (const v1::SweepPoint& p : sweep.points()) {
    points.AddRow({absl::StrCat(p.index()), absl::StrCat(p.world_size()),
                   absl::StrCat(p.batch_size()), absl::StrCat(p.zero_stage()),
                   OrDash(p.scaling()), OrDash(p.shape()), absl::StrCat(p.repeat()),
                   p.job_id() != 0 ? absl::StrCat(p.job_id()) : "-", PointState(p)});
  }
  return absl::StrCat(out, "\n", points.Render());
}

std::string FormatSweepPointsCsv(const v1::Sweep& sweep) {
  std::string out =
      "index,world_size,batch_size,scaling,shape,repeat,job_id,state,zero_stage\n";
  for (const v1::SweepPoint& p : sweep.points()) {
    absl::StrAppend(&out, p.index(), ",", p.world_size(), ",", p.batch_size(), ",",
                    CsvField(p.scaling()), ",", CsvField(p.shape()), ",", p.repeat(), ",",
                    p.job_id(), ",", PointState(p), ",", p.zero_stage(), "\n");
  }
  return out;
}

std::string FormatSweepReportTable(const v1::SweepReport& report) {
  Table table({"WORLD", "BATCH", "SCALING", "SHAPE", "ZERO", "RUNS", "EPOCH_TIME",
               "SPEEDUP", "EFFICIENCY", "COMM", "ACCURACY", "MEMORY/RANK",
               "OPTIMIZER/RANK", "GRADIENTS/RANK", "PARAMETERS/RANK"});
  for (const v1::SweepReportRow& row : report.rows()) {
    const bool counted = row.runs() > 0;
    table.AddRow(
        {absl::StrCat(row.world_size()), absl::StrCat(row.batch_size()),
         OrDash(row.scaling()), OrDash(row.shape()), absl::StrCat(row.zero_stage()),
         absl::StrCat(row.runs()), EpochTimeCell(row),
         RatioCell(row, row.speedup(), "%.2fx"),
         RatioCell(row, row.efficiency() * 100, "%.1f%%"),
         counted ? absl::StrFormat("%.1f%%", row.comm_share() * 100) : "-",
         !counted ? "-"
         // Marked where eval jobs (tessctl eval) gave some runs' top-1.
         : row.eval_runs() > 0
             ? absl::StrCat(FormatPercent(row.final_accuracy()), " (eval ",
                            row.eval_runs(), "/", row.runs(), ")")
             : FormatPercent(row.final_accuracy()),
         PeakMemoryCell(row),
         BytesCell(row.has_optimizer_state_bytes_per_rank(),
                   row.optimizer_state_bytes_per_rank()),
         BytesCell(row.has_gradient_bytes_per_rank(), row.gradient_bytes_per_rank()),
         BytesCell(row.has_parameter_bytes_per_rank(), row.parameter_bytes_per_rank())});
  }
  return table.Render();
}

std::string FormatSweepReportCsv(const v1::SweepReport& report) {
  std::string out =
      "world_size,batch_size,scaling,shape,runs,epoch_time_mean_s,epoch_time_std_s,"
      "total_time_mean_s,images_per_sec,speedup,efficiency,baseline_world_size,"
      "comm_share,final_accuracy,job_ids,zero_stage,optimizer_state_bytes_per_rank,"
      "gradient_bytes_per_rank,peak_memory_bytes_per_rank,memory_source,"
      "parameter_bytes_per_rank\n";
  for (const v1::SweepReportRow& row : report.rows()) {
    absl::StrAppend(
        &out, row.world_size(), ",", row.batch_size(), ",", CsvField(row.scaling()), ",",
        CsvField(row.shape()), ",", row.runs(), ",", ExactDouble(row.epoch_time_mean_s()),
        ",", ExactDouble(row.epoch_time_std_s()), ",",
        ExactDouble(row.total_time_mean_s()), ",", ExactDouble(row.images_per_sec()), ",",
        ExactDouble(row.speedup()), ",", ExactDouble(row.efficiency()), ",",
        row.baseline_world_size(), ",", ExactDouble(row.comm_share()), ",",
        ExactDouble(row.final_accuracy()), ",", absl::StrJoin(row.job_ids(), " "), ",",
        row.zero_stage(), ",",
        BytesCsvField(row.has_optimizer_state_bytes_per_rank(),
                      row.optimizer_state_bytes_per_rank()),
        ",",
        BytesCsvField(row.has_gradient_bytes_per_rank(), row.gradient_bytes_per_rank()),
        ",",
        BytesCsvField(row.has_peak_memory_bytes_per_rank(),
                      row.peak_memory_bytes_per_rank()),
        ",", CsvField(row.memory_source()), ",",
        BytesCsvField(row.has_parameter_bytes_per_rank(), row.parameter_bytes_per_rank()),
        "\n");
  }
  return out;
}

json SweepPointToJson(const v1::SweepPoint& p) {
  return {{"index", p.index()},
          {"world_size", p.world_size()},
          {"batch_size", p.batch_size()},
          {"zero_stage", p.zero_stage()},
          {"scaling", p.scaling()},
          {"shape", p.shape()},
          {"repeat", p.repeat()},
          {"job_id", p.job_id() != 0 ? json(p.job_id()) : json(nullptr)},
          {"state", PointState(p)}};
}

json SweepToJson(const v1::Sweep& sweep, bool detailed) {
  const PointCounts counts = CountPoints(sweep);
  json out = {{"id", sweep.id()},
              {"name", sweep.name()},
              {"state", SweepStateName(sweep.state())},
              {"reason", sweep.reason()},
              {"created", Rfc3339(sweep.created_unix_ms())},
              {"created_unix_ms", sweep.created_unix_ms()},
              {"updated", Rfc3339(sweep.updated_unix_ms())},
              {"updated_unix_ms", sweep.updated_unix_ms()},
              {"counts",
               {{"total", counts.total},
                {"succeeded", counts.succeeded},
                {"failed", counts.failed},
                {"running", counts.running},
                {"waiting", counts.waiting}}},
              {"spec", ProtoToJson(sweep.spec())}};
  if (detailed) {
    json points = json::array();
    for (const v1::SweepPoint& p : sweep.points()) points.push_back(SweepPointToJson(p));
    out["points"] = std::move(points);
    out["spec_yaml"] = sweep.spec_yaml();
  }
  return out;
}

json SweepReportToJson(const v1::SweepReport& report) {
  json rows = json::array();
  for (const v1::SweepReportRow& row : report.rows()) {
    json job_ids = json::array();
    for (int64_t id : row.job_ids()) job_ids.push_back(id);
    rows.push_back(
        {{"world_size", row.world_size()},
         {"batch_size", row.batch_size()},
         {"scaling", row.scaling()},
         {"shape", row.shape()},
         {"runs", row.runs()},
         {"epoch_time_mean_s", row.epoch_time_mean_s()},
         {"epoch_time_std_s", row.epoch_time_std_s()},
         {"total_time_mean_s", row.total_time_mean_s()},
         {"images_per_sec", row.images_per_sec()},
         {"speedup", row.speedup()},
         {"efficiency", row.efficiency()},
         {"baseline_world_size", row.baseline_world_size()},
         {"comm_share", row.comm_share()},
         {"final_accuracy", row.final_accuracy()},
         {"eval_runs", row.eval_runs()},
         {"job_ids", std::move(job_ids)},
         {"zero_stage", row.zero_stage()},
         {"optimizer_state_bytes_per_rank",
          BytesJson(row.has_optimizer_state_bytes_per_rank(),
                    row.optimizer_state_bytes_per_rank())},
         {"gradient_bytes_per_rank",
          BytesJson(row.has_gradient_bytes_per_rank(), row.gradient_bytes_per_rank())},
         {"peak_memory_bytes_per_rank", BytesJson(row.has_peak_memory_bytes_per_rank(),
                                                  row.peak_memory_bytes_per_rank())},
         {"memory_source",
          row.memory_source().empty() ? json(nullptr) : json(row.memory_source())},
         {"parameter_bytes_per_rank", BytesJson(row.has_parameter_bytes_per_rank(),
                                                row.parameter_bytes_per_rank())}});
  }
  return {{"sweep_id", report.sweep_id()}, {"rows", std::move(rows)}};
}

}  // namespace tessera::cli
