#include "cli/output.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/job_spec.h"
#include "google/protobuf/descriptor.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using json = nlohmann::ordered_json;

namespace {

absl::Time FromUnixMs(int64_t ms) { return absl::FromUnixMillis(ms); }

// Reasons can be long; tables show the start, JSON the whole text.
constexpr size_t kMaxReasonCellChars = 72;

std::string ReasonCell(const v1::Job& job) {
  const std::string& text =
      job.state() == v1::JOB_STATE_QUEUED && !job.pending_reason().empty()
          ? job.pending_reason()
          : job.reason();
  return text.empty() ? "-" : TruncateToWidth(Sanitize(text), kMaxReasonCellChars);
}

std::string ExitCell(const v1::RankStatus& rank) {
  if (rank.state() != "exited") return "-";
  if (rank.signal() != 0) return absl::StrCat("signal ", rank.signal());
  return absl::StrCat(rank.exit_code());
}

json ScalarToJson(const Message& msg, const FieldDescriptor* field, int index) {
  const Reflection* refl = msg.GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? refl->GetRepeatedInt32(msg, field, index) : refl->GetInt32(msg, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? refl->GetRepeatedInt64(msg, field, index) : refl->GetInt64(msg, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? refl->GetRepeatedUInt32(msg, field, index)
                 : refl->GetUInt32(msg, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? refl->GetRepeatedUInt64(msg, field, index)
                 : refl->GetUInt64(msg, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? refl->GetRepeatedDouble(msg, field, index)
                 : refl->GetDouble(msg, field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? refl->GetRepeatedFloat(msg, field, index) : refl->GetFloat(msg, field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? refl->GetRepeatedBool(msg, field, index) : refl->GetBool(msg, field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? refl->GetRepeatedEnum(msg, field, index) : refl->GetEnum(msg, field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? refl->GetRepeatedString(msg, field, index)
                 : refl->GetString(msg, field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(rep ? refl->GetRepeatedMessage(msg, field, index)
                             : refl->GetMessage(msg, field));
  }
  return nullptr;
}

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::string Sanitize(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text;
}

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  for (char c : text) {
    if (!IsUtf8Continuation(c)) ++width;
  }
  return width;
}

std::string TruncateToWidth(const std::string& text, size_t width) {
  if (DisplayWidth(text) <= width) return text;
  if (width <= 3) return std::string(width, '.');
  // Keep width - 3 code points, then "...".
  size_t kept = 0;
  size_t end = 0;
  while (end < text.size()) {
    if (!IsUtf8Continuation(text[end])) {
      if (kept == width - 3) break;
      ++kept;
    }
    ++end;
  }
  return text.substr(0, end) + "...";
}

std::string CsvField(absl::string_view value) {
  if (value.find_first_of(",\"\n\r") == absl::string_view::npos)
    return std::string(value);
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

std::string ExactDouble(double value) {
  char buf[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string Rfc3339(int64_t unix_ms) {
  return absl::FormatTime(absl::RFC3339_full, FromUnixMs(unix_ms), absl::UTCTimeZone());
}

std::string Ago(int64_t unix_ms, const FormatContext& ctx) {
  if (unix_ms <= 0) return "-";
  absl::Duration d = ctx.now - FromUnixMs(unix_ms);
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  return HumanDuration(d);
}

std::string LocalTime(int64_t unix_ms, const FormatContext& ctx) {
  if (unix_ms <= 0) return "-";
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", FromUnixMs(unix_ms), ctx.tz), " (",
      Ago(unix_ms, ctx), " ago)");
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

std::string HumanDuration(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t total = absl::ToInt64Seconds(d);
  const int64_t days = total / 86400;
  const int64_t hours = (total % 86400) / 3600;
  const int64_t minutes = (total % 3600) / 60;
  const int64_t seconds = total % 60;
  if (days > 0) return absl::StrFormat("%dd%02dh", days, hours);
  if (hours > 0) return absl::StrFormat("%dh%02dm", hours, minutes);
  if (minutes > 0) return absl::StrFormat("%dm%02ds", minutes, seconds);
  return absl::StrFormat("%ds", seconds);
}

std::string FormatElapsed(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t total = absl::ToInt64Seconds(d);
  if (total >= 3600) {
    return absl::StrFormat("%d:%02d:%02d", total / 3600, (total % 3600) / 60, total % 60);
  }
  return absl::StrFormat("%02d:%02d", total / 60, total % 60);
}

std::string FormatPercent(double fraction) {
  return absl::StrFormat("%.2f%%", fraction * 100.0);
}

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void Table::AddRow(std::vector<std::string> cells) {
  for (std::string& cell : cells) cell = Sanitize(std::move(cell));
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    out += line;
    out += '\n';
  }
  return out;
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs, const FormatContext& ctx) {
  Table table({"ID", "NAME", "STATE", "WORLD", "ATTEMPT", "AGE", "REASON"});
  for (const v1::Job& job : jobs) {
    table.AddRow({absl::StrCat(job.id()), job.name(), JobStateName(job.state()),
                  absl::StrCat(job.spec().world_size()), absl::StrCat(job.attempt()),
                  Ago(job.created_unix_ms(), ctx), ReasonCell(job)});
  }
  return table.Render();
}

std::string FormatJobsCsv(const std::vector<v1::Job>& jobs) {
  std::string out =
      "id,name,state,world_size,attempt,created_unix_ms,updated_unix_ms,sweep_id,"
      "reason\n";
  for (const v1::Job& job : jobs) {
    absl::StrAppend(&out, job.id(), ",", CsvField(job.name()), ",",
                    JobStateName(job.state()), ",", job.spec().world_size(), ",",
                    job.attempt(), ",", job.created_unix_ms(), ",", job.updated_unix_ms(),
                    ",", job.sweep_id(), ",", CsvField(job.reason()), "\n");
  }
  return out;
}

// What a running rank is doing: "forward 0.2s", "collective allreduce #31
// (bucket 2) 12s", with " STRAGGLER" when flagged and "(silent 9s)" when its
// last report is old.
std::string ProgressCell(const v1::RankStatus& rank) {
  if (!rank.has_progress()) return "-";
  const v1::RankProgress& p = rank.progress();
  std::string out = Sanitize(p.phase().empty() ? "?" : p.phase());
  if (!p.collective().empty()) absl::StrAppend(&out, " ", Sanitize(p.collective()));
  const double in_phase_s =
      static_cast<double>(p.phase_elapsed_ms() + rank.progress_age_ms()) / 1000;
  if (in_phase_s >= 1) absl::StrAppend(&out, absl::StrFormat(" %.0fs", in_phase_s));
  if (rank.progress_age_ms() >= 5000) {
    absl::StrAppend(&out,
                    absl::StrFormat(" (silent %.0fs)",
                                    static_cast<double>(rank.progress_age_ms()) / 1000));
  }
  if (rank.straggler()) absl::StrAppend(&out, " STRAGGLER");
  return out;
}

std::string FormatJobStatus(const v1::Job& job, const FormatContext& ctx,
                            const RankFigures& memory) {
  Table fields({"JOB", absl::StrCat(job.id())});
  fields.AddRow({"NAME", job.name()});
  fields.AddRow(
      {"STATE", job.not_stored()
                    ? absl::StrCat(JobStateName(job.state()),
                                   " (not yet stored: the database is failing "
                                   "writes; the coordinator keeps them for retry)")
                    : std::string(JobStateName(job.state()))});
  if (!job.owner().empty()) fields.AddRow({"OWNER", job.owner()});
  if (!job.reason().empty()) fields.AddRow({"REASON", job.reason()});
  if (!job.pending_reason().empty()) fields.AddRow({"PENDING", job.pending_reason()});
  if (!job.slurm_allocation().empty()) {
    fields.AddRow(
        {"SLURM", absl::StrCat("allocation ", Sanitize(job.slurm_allocation()))});
  }
  fields.AddRow({"ATTEMPT", job.preemptions() > 0
                                ? absl::StrCat(job.attempt(), " (", job.preemptions(),
                                               " preempted, not counted as restarts)")
                                : absl::StrCat(job.attempt())});
  for (const std::string& s : job.stragglers()) {
    fields.AddRow({"STRAGGLER", Sanitize(s)});
  }
  if (job.metrics_not_stored() > 0 || job.log_lines_not_stored() > 0) {
    fields.AddRow(
        {"NOT STORED",
         absl::StrCat(job.metrics_not_stored(), " metric rows, ",
                      job.log_lines_not_stored(),
                      " log lines (the database's disk was below its reserve)")});
  }
  if (job.sweep_id() != 0) {
    fields.AddRow(
        {"SWEEP", absl::StrCat(job.sweep_id(), " (point ", job.sweep_point(), ")")});
  }
  fields.AddRow({"WORLD", absl::StrCat(job.spec().world_size())});
  if (absl::StatusOr<int64_t> memory = MemoryPerRankBytes(job.spec());
      memory.ok() && *memory > 0) {
    fields.AddRow(
        {"MEMORY/RANK", absl::StrCat(FormatByteSize(*memory),
                                     " (memory_per_rank, enforced by the worker)")});
  }
  fields.AddRow(
      {"TRAINER", absl::StrJoin(TrainerConfigToFlags(job.spec().trainer()), " ")});
  if (job.ranks_size() > 0 && job.ranks(0).has_eval()) {
    const v1::EvalResult& e = job.ranks(0).eval();
    fields.AddRow({"EVAL", absl::StrCat("top-1 ", FormatPercent(e.top1()), ", top-5 ",
                                        FormatPercent(e.top5()), ", loss ",
                                        absl::StrFormat("%.4f", e.loss()), " on ",
                                        e.split(), " (", e.samples(), " samples, step ",
                                        e.step(), "; per class: -o json)")});
  }
  fields.AddRow({"CREATED", LocalTime(job.created_unix_ms(), ctx)});
  fields.AddRow({"UPDATED", LocalTime(job.updated_unix_ms(), ctx)});
  std::string out = fields.Render();
  if (job.ranks_size() == 0) return out;

  Table ranks({"RANK", "WORKER", "SLOT", "STATE", "STEP", "PHASE", "PID", "EXIT",
               "PARAM_HASH", "TEST_ACCURACY", "EXIT_REASON"});
  for (const v1::RankStatus& rank : job.ranks()) {
    ranks.AddRow(
        {absl::StrCat(rank.rank()), rank.worker().empty() ? "-" : rank.worker(),
         absl::StrCat(rank.slot()), rank.state().empty() ? "-" : rank.state(),
         rank.has_progress() ? absl::StrCat(rank.progress().step()) : "-",
         ProgressCell(rank), rank.pid() > 0 ? absl::StrCat(rank.pid()) : "-",
         ExitCell(rank),
         rank.has_result() && !rank.param_hash().empty() ? rank.param_hash() : "-",
         rank.has_result() ? FormatPercent(rank.test_accuracy()) : "-",
         rank.exit_reason().empty() ? "-" : Sanitize(rank.exit_reason())});
  }
  out = absl::StrCat(out, "\n", ranks.Render(), RankMemoryTable(memory));
  if (job.events_size() == 0) return out;
  Table events({"TIME", "STATE", "REASON"});
  for (const v1::JobEvent& e : job.events()) {
    events.AddRow({LocalTime(e.unix_ms(), ctx), JobStateName(e.to_state()),
                   e.reason().empty() ? "-" : Sanitize(e.reason())});
  }
  return absl::StrCat(out, "\n", events.Render());
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

std::string FormatWorkersTable(const std::vector<v1::Worker>& workers,
                               const FormatContext& ctx) {
  Table table({"NAME", "HOST", "KIND", "SLOTS", "GPUS", "USED", "ALIVE", "STATE", "POOL",
               "LAST-SEEN"});
  for (const v1::Worker& w : workers) {
    const std::string ago = Ago(w.last_seen_unix_ms(), ctx);
    std::string pool = w.pool().empty() ? "-" : Sanitize(w.pool());
    if (!w.slurm_job_id().empty()) {
      absl::StrAppend(&pool, " (slurm ", Sanitize(w.slurm_job_id()), ")");
    }
    table.AddRow(
        {w.name(), w.hostname().empty() ? "-" : w.hostname(),
         w.device_kind().empty() ? "-" : w.device_kind(), absl::StrCat(w.slots()),
         w.gpu_ids().empty() ? "-" : Sanitize(absl::StrJoin(w.gpu_ids(), ",")),
         w.slots_used_by_others() > 0
             ? absl::StrCat(w.slots_used(), " (", w.slots_used_by_others(), " others')")
             : absl::StrCat(w.slots_used()),
         w.alive() ? "yes" : "no",
         w.drained() ? "drained" : (w.draining() ? "draining" : "ok"), pool,
         ago == "-" ? ago : absl::StrCat(ago, " ago")});
  }
  return table.Render();
}

std::string FormatWorkersCsv(const std::vector<v1::Worker>& workers) {
  std::string out =
      "name,hostname,device_kind,slots,slots_used,alive,last_seen_unix_ms,"
      "slots_used_by_others,draining,drained,pool,slurm_job_id,gpu_ids\n";
  for (const v1::Worker& w : workers) {
    absl::StrAppend(&out, CsvField(w.name()), ",", CsvField(w.hostname()), ",",
                    CsvField(w.device_kind()), ",", w.slots(), ",", w.slots_used(), ",",
                    w.alive() ? "true" : "false", ",", w.last_seen_unix_ms(), ",",
                    w.slots_used_by_others(), ",", w.draining() ? "true" : "false", ",",
                    w.drained() ? "true" : "false", ",", CsvField(w.pool()), ",",
                    CsvField(w.slurm_job_id()), ",",
                    CsvField(absl::StrJoin(w.gpu_ids(), ",")), "\n");
  }
  return out;
}

std::string FormatShareTable(const std::vector<v1::UserShare>& users) {
  Table table({"USER", "USAGE(slot-s)", "FACTOR", "RUNNING-RANKS", "QUEUED-JOBS",
               "RANK-MEMORY", "MEMORY/RANK-CAP"});
  for (const v1::UserShare& u : users) {
    table.AddRow({u.user().empty() ? "-" : Sanitize(u.user()),
                  absl::StrFormat("%.0f", u.usage_slot_seconds()),
                  absl::StrFormat("%.3f", u.factor()), absl::StrCat(u.running_ranks()),
                  absl::StrCat(u.queued_jobs()),
                  u.running_memory_limit_bytes() > 0
                      ? FormatByteSize(u.running_memory_limit_bytes())
                      : "-",
                  u.max_memory_per_rank_bytes() > 0
                      ? FormatByteSize(u.max_memory_per_rank_bytes())
                      : "-"});
  }
  return table.Render();
}

std::string FormatShareCsv(const std::vector<v1::UserShare>& users) {
  std::string out =
      "user,usage_slot_seconds,factor,running_ranks,queued_jobs,"
      "running_memory_limit_bytes,max_memory_per_rank_bytes\n";
  for (const v1::UserShare& u : users) {
    absl::StrAppend(&out, CsvField(u.user()), ",", u.usage_slot_seconds(), ",",
                    u.factor(), ",", u.running_ranks(), ",", u.queued_jobs(), ",",
                    u.running_memory_limit_bytes(), ",", u.max_memory_per_rank_bytes(),
                    "\n");
  }
  return out;
}

std::string FormatMetricsTable(const std::vector<v1::MetricPoint>& points,
                               const FormatContext& ctx) {
  Table table({"ATTEMPT", "RANK", "STEP", "NAME", "VALUE", "TIME"});
  for (const v1::MetricPoint& p : points) {
    table.AddRow({absl::StrCat(p.attempt()), absl::StrCat(p.rank()),
                  absl::StrCat(p.step()), p.name(), absl::StrFormat("%.6g", p.value()),
                  p.unix_ms() > 0 ? absl::FormatTime("%Y-%m-%d %H:%M:%S",
                                                     FromUnixMs(p.unix_ms()), ctx.tz)
                                  : "-"});
  }
  return table.Render();
}

std::string FormatMetricsCsv(const std::vector<v1::MetricPoint>& points) {
  std::string out = "attempt,rank,step,name,value,unix_ms\n";
  for (const v1::MetricPoint& p : points) {
    absl::StrAppend(&out, p.attempt(), ",", p.rank(), ",", p.step(), ",",
                    CsvField(p.name()), ",", ExactDouble(p.value()), ",", p.unix_ms(),
                    "\n");
  }
  return out;
}

json ProtoToJson(const Message& message) {
  json out = json::object();
  const google::protobuf::Descriptor* desc = message.GetDescriptor();
  const Reflection* refl = message.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* field = desc->field(i);
    if (field->is_repeated()) {
      json values = json::array();
      for (int j = 0; j < refl->FieldSize(message, field); ++j) {
        values.push_back(ScalarToJson(message, field, j));
      }
      out[field->name()] = std::move(values);
      continue;
    }
    // Optional scalars without a value are left out; unset messages too.
    if (field->has_presence() && !refl->HasField(message, field)) continue;
    out[field->name()] = ScalarToJson(message, field, 0);
  }
  return out;
}

// An eval job's result (rank 0's, which every rank measured alike): the
// totals, each class's accuracy, and the confusion matrix as rows (true
// class) of counts by predicted class. null for other jobs.
json EvalToJson(const v1::Job& job) {
  if (job.ranks_size() == 0 || !job.ranks(0).has_eval()) return nullptr;
  const v1::EvalResult& e = job.ranks(0).eval();
  json classes = json::array();
  for (int c = 0; c < e.class_names_size(); ++c) {
    classes.push_back(
        {{"name", e.class_names(c)},
         {"accuracy", c < e.class_accuracy_size() ? json(e.class_accuracy(c)) : json()},
         {"samples", c < e.class_samples_size() ? json(e.class_samples(c)) : json()}});
  }
  json confusion = json::array();
  const int k = e.class_names_size();
  if (k > 0 && e.confusion_size() == k * k) {
    for (int row = 0; row < k; ++row) {
      confusion.push_back(std::vector<int64_t>(e.confusion().begin() + row * k,
                                               e.confusion().begin() + (row + 1) * k));
    }
  }
  return {{"split", e.split()}, {"step", e.step()},      {"samples", e.samples()},
          {"top1", e.top1()},   {"top5", e.top5()},      {"loss", e.loss()},
          {"classes", classes}, {"confusion", confusion}};
}

json JobToJson(const v1::Job& job, bool include_spec_yaml) {
  json ranks = json::array();
  for (const v1::RankStatus& r : job.ranks()) {
    json progress = nullptr;
    if (r.has_progress()) {
      progress = ProtoToJson(r.progress());
      progress["age_ms"] = r.progress_age_ms();
    }
    ranks.push_back(
        {{"rank", r.rank()},
         {"progress", std::move(progress)},
         {"straggler", r.straggler()},
         {"worker", r.worker()},
         {"slot", r.slot()},
         {"state", r.state()},
         {"pid", r.pid()},
         {"exit_code", r.exit_code()},
         {"signal", r.signal()},
         {"param_hash", r.has_result() ? json(r.param_hash()) : json(nullptr)},
         {"test_accuracy", r.has_result() ? json(r.test_accuracy()) : json(nullptr)},
         {"exit_reason", r.exit_reason()}});
  }
  json events = json::array();
  for (const v1::JobEvent& e : job.events()) {
    events.push_back({{"time", Rfc3339(e.unix_ms())},
                      {"unix_ms", e.unix_ms()},
                      {"from", e.from_state() == v1::JOB_STATE_UNSPECIFIED
                                   ? json(nullptr)
                                   : json(JobStateName(e.from_state()))},
                      {"to", JobStateName(e.to_state())},
                      {"reason", e.reason()}});
  }
  json out = {
      {"id", job.id()},
      {"name", job.name()},
      {"state", JobStateName(job.state())},
      {"owner", job.owner()},
      {"reason", job.reason()},
      {"pending_reason", job.pending_reason()},
      {"attempt", job.attempt()},
      {"preemptions", job.preemptions()},
      {"not_stored", job.not_stored()},
      {"metrics_not_stored", job.metrics_not_stored()},
      {"log_lines_not_stored", job.log_lines_not_stored()},
      {"slurm_allocation", job.slurm_allocation()},
      {"stragglers",
       json(std::vector<std::string>(job.stragglers().begin(), job.stragglers().end()))},
      {"world_size", job.spec().world_size()},
      {"sweep_id", job.sweep_id() != 0 ? json(job.sweep_id()) : json(nullptr)},
      {"sweep_point", job.sweep_id() != 0 ? json(job.sweep_point()) : json(nullptr)},
      {"created", Rfc3339(job.created_unix_ms())},
      {"created_unix_ms", job.created_unix_ms()},
      {"updated", Rfc3339(job.updated_unix_ms())},
      {"updated_unix_ms", job.updated_unix_ms()},
      {"ranks", std::move(ranks)},
      {"events", std::move(events)},
      {"kind", job.spec().kind().empty() ? "train" : job.spec().kind()},
      {"eval", EvalToJson(job)},
      {"spec", ProtoToJson(job.spec())}};
  if (include_spec_yaml) out["spec_yaml"] = job.spec_yaml();
  return out;
}

json WorkerToJson(const v1::Worker& w) {
  return {{"name", w.name()},
          {"hostname", w.hostname()},
          {"device_kind", w.device_kind()},
          {"slots", w.slots()},
          {"slots_used", w.slots_used()},
          {"slots_used_by_others", w.slots_used_by_others()},
          {"alive", w.alive()},
          {"epoch", w.epoch()},
          {"last_seen", Rfc3339(w.last_seen_unix_ms())},
          {"last_seen_unix_ms", w.last_seen_unix_ms()},
          {"draining", w.draining()},
          {"drained", w.drained()},
          {"drain_reason", w.drain_reason()},
          {"pool", w.pool()},
          {"slurm_job_id", w.slurm_job_id()},
          {"gpu_ids", std::vector<std::string>(w.gpu_ids().begin(), w.gpu_ids().end())}};
}

json UserShareToJson(const v1::UserShare& u) {
  return {{"user", u.user()},
          {"usage_slot_seconds", u.usage_slot_seconds()},
          {"factor", u.factor()},
          {"running_ranks", u.running_ranks()},
          {"queued_jobs", u.queued_jobs()},
          {"running_memory_limit_bytes", u.running_memory_limit_bytes()},
          {"max_memory_per_rank_bytes", u.max_memory_per_rank_bytes()}};
}

json MetricPointToJson(const v1::MetricPoint& p) {
  return {{"attempt", p.attempt()}, {"rank", p.rank()},   {"step", p.step()},
          {"name", p.name()},       {"value", p.value()}, {"unix_ms", p.unix_ms()}};
}

std::optional<double> LatestStepMean(const std::vector<v1::MetricPoint>& points,
                                     const std::string& name) {
  // Newest attempt first, then newest step within it.
  std::optional<std::pair<int32_t, int64_t>> latest;
  for (const v1::MetricPoint& p : points) {
    if (p.name() != name) continue;
    const std::pair<int32_t, int64_t> key(p.attempt(), p.step());
    if (!latest || key > *latest) latest = key;
  }
  if (!latest) return std::nullopt;
  double sum = 0;
  int count = 0;
  for (const v1::MetricPoint& p : points) {
    if (p.name() == name && p.attempt() == latest->first && p.step() == latest->second) {
      sum += p.value();
      ++count;
    }
  }
  return sum / count;
}

}  // namespace tessera::cli
