#include "cli/search_output.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/search_spec.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxReasonCellChars = 72;

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

// The searched keys in the spec's order; keys a trial has that the spec does
// not list (none, from a well-behaved coordinator) follow in name order.
std::vector<std::string> ParameterKeys(const v1::Search& search) {
  std::vector<std::string> keys;
  for (const v1::SearchParameter& p : search.spec().search().parameters()) {
    keys.push_back(p.key());
  }
  std::vector<std::string> extra;
  for (const v1::SearchTrial& trial : search.trials()) {
    for (const auto& [key, value] : trial.parameters()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end() &&
          std::find(extra.begin(), extra.end(), key) == extra.end()) {
        extra.push_back(key);
      }
    }
  }
  std::sort(extra.begin(), extra.end());
  keys.insert(keys.end(), extra.begin(), extra.end());
  return keys;
}

std::string ParameterValue(const v1::SearchTrial& trial, const std::string& key) {
  auto it = trial.parameters().find(key);
  return it == trial.parameters().end() ? "" : it->second;
}

// A metric's value in tables: four significant digits ("0.8512", "1.234e-05").
std::string MetricCell(double value) { return absl::StrFormat("%.4g", value); }

std::string BestMetricCell(const v1::SearchTrial& trial) {
  return trial.has_best_metric() ? MetricCell(trial.best_metric()) : "-";
}

std::string MetricName(const v1::Search& search) {
  return OrDash(search.spec().search().metric());
}

std::string ModeName(const v1::Search& search) {
  return SearchMaximizes(search.spec().search()) ? "max" : "min";
}

// "asha (eta 3, 3 rungs)", "random (seed 1)" or "grid".
std::string MethodCell(const v1::Search& search) {
  const v1::SearchConfig& config = search.spec().search();
  if (config.method() == "asha") {
    return absl::StrFormat(
        "asha (eta %d, %d rungs, seed %d)", SearchReductionFactor(config),
        static_cast<int>(SearchRungLengths(config).size()), config.seed());
  }
  if (config.method() == "random")
    return absl::StrCat("random (seed ", config.seed(), ")");
  return OrDash(config.method());
}

json JsonIds(const google::protobuf::RepeatedField<int64_t>& ids) {
  json out = json::array();
  for (int64_t id : ids) out.push_back(id);
  return out;
}

// "1 trial", "27 trials".
std::string Trials(int n) { return absl::StrCat(n, n == 1 ? " trial" : " trials"); }

// "best trial 11: val_accuracy 0.7456", then " at rung 2" with `at_rung`; ""
// before any trial has a metric.
// Where the trial's best metric was recorded is known: it has one, from a
// coordinator that says where (best_job_id).
bool BestIsPlaced(const v1::SearchTrial& trial) {
  return trial.has_best_metric() && trial.best_job_id() != 0;
}

// "best trial 11: val_accuracy 0.7456", and with `at_rung` where it scored
// that (the rung and step; a coordinator that does not say: its latest rung).
std::string BestSummary(const v1::Search& search, bool at_rung) {
  const v1::SearchTrial* best = BestTrial(search);
  if (best == nullptr) return "";
  std::string where;
  if (at_rung && BestIsPlaced(*best)) {
    where = absl::StrCat(" at rung ", best->best_rung(), ", step ", best->best_step());
  } else if (at_rung) {
    where = absl::StrCat(" at rung ", best->rung());
  }
  return absl::StrCat("best trial ", best->index(), ": ", MetricName(search), " ",
                      BestMetricCell(*best), where);
}

// A field of where the best was recorded, null when that is not known.
json BestPlaceJson(const v1::SearchTrial& trial, int64_t value) {
  return BestIsPlaced(trial) ? json(value) : json(nullptr);
}

json BestTrialJson(const v1::Search& search) {
  return search.best_trial() >= 0 ? json(search.best_trial()) : json(nullptr);
}

}  // namespace

std::string SearchStateName(v1::SearchState state) {
  std::string name = v1::SearchState_Name(state);
  constexpr absl::string_view kPrefix = "SEARCH_STATE_";
  if (absl::StartsWith(name, kPrefix)) name.erase(0, kPrefix.size());
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

bool IsTerminal(v1::SearchState state) {
  return state == v1::SEARCH_STATE_SUCCEEDED || state == v1::SEARCH_STATE_FAILED ||
         state == v1::SEARCH_STATE_CANCELLED;
}

TrialCounts CountTrials(const v1::Search& search) {
  TrialCounts counts;
  for (const v1::SearchTrial& trial : search.trials()) {
    ++counts.started;
    const std::string& s = trial.status();
    if (s == "running") ++counts.running;
    if (s == "paused") ++counts.paused;
    if (s == "stopped") ++counts.stopped;
    if (s == "completed") ++counts.completed;
    if (s == "failed") ++counts.failed;
  }
  return counts;
}

const v1::SearchTrial* BestTrial(const v1::Search& search) {
  if (search.best_trial() < 0) return nullptr;
  for (const v1::SearchTrial& trial : search.trials()) {
    if (trial.index() == search.best_trial()) return &trial;
  }
  return nullptr;
}

int64_t LatestJob(const v1::SearchTrial& trial) {
  return trial.job_ids().empty() ? 0 : trial.job_ids(trial.job_ids_size() - 1);
}

std::string DescribeTrial(const v1::Search& search, const v1::SearchTrial& trial) {
  std::vector<std::string> values;
  for (const std::string& key : ParameterKeys(search)) {
    if (trial.parameters().contains(key)) {
      values.push_back(absl::StrCat(key, "=", ParameterValue(trial, key)));
    }
  }
  return absl::StrCat("trial ", trial.index(), " (", absl::StrJoin(values, ", "), ")");
}

std::string FormatSearchesTable(const std::vector<v1::Search>& searches,
                                const FormatContext& ctx) {
  Table table({"ID", "NAME", "METHOD", "STATE", "TRIALS", "RUNNING", "FAILED", "BEST",
               "AGE", "REASON"});
  for (const v1::Search& search : searches) {
    const TrialCounts counts = CountTrials(search);
    const v1::SearchTrial* best = BestTrial(search);
    table.AddRow({absl::StrCat(search.id()), search.name(),
                  OrDash(search.spec().search().method()),
                  SearchStateName(search.state()),
                  absl::StrCat(counts.started, "/", SearchTrialCount(search.spec())),
                  absl::StrCat(counts.running), absl::StrCat(counts.failed),
                  best != nullptr ? BestMetricCell(*best) : "-",
                  Ago(search.created_unix_ms(), ctx),
                  TruncateToWidth(OrDash(search.reason()), kMaxReasonCellChars)});
  }
  return table.Render();
}

std::string FormatSearchesCsv(const std::vector<v1::Search>& searches) {
  std::string out =
      "id,name,method,state,max_trials,started,running,failed,best_trial,best_metric,"
      "created_unix_ms,updated_unix_ms,reason\n";
  for (const v1::Search& search : searches) {
    const TrialCounts counts = CountTrials(search);
    const v1::SearchTrial* best = BestTrial(search);
    absl::StrAppend(&out, search.id(), ",", CsvField(search.name()), ",",
                    CsvField(search.spec().search().method()), ",",
                    SearchStateName(search.state()), ",", SearchTrialCount(search.spec()),
                    ",", counts.started, ",", counts.running, ",", counts.failed, ",",
                    best != nullptr ? absl::StrCat(best->index()) : "", ",",
                    best != nullptr ? ExactDouble(best->best_metric()) : "", ",",
                    search.created_unix_ms(), ",", search.updated_unix_ms(), ",",
                    CsvField(search.reason()), "\n");
  }
  return out;
}

std::string FormatSearchStatus(const v1::Search& search, const FormatContext& ctx) {
  const v1::SearchConfig& config = search.spec().search();
  const TrialCounts counts = CountTrials(search);
  Table fields({"SEARCH", absl::StrCat(search.id())});
  fields.AddRow({"NAME", search.name()});
  if (!search.owner().empty()) fields.AddRow({"OWNER", search.owner()});
  fields.AddRow({"STATE", SearchStateName(search.state())});
  if (!search.reason().empty()) fields.AddRow({"REASON", search.reason()});
  fields.AddRow({"METHOD", MethodCell(search)});
  fields.AddRow({"METRIC", absl::StrCat(MetricName(search), ", ", ModeName(search))});
  fields.AddRow(
      {"LENGTH",
       absl::StrCat(config.max_length(), " ",
                    config.length_unit().empty() ? "steps" : config.length_unit())});
  fields.AddRow({"CONCURRENT", absl::StrCat(std::max(config.max_concurrent(), 1))});
  fields.AddRow(
      {"TRIALS",
       absl::StrFormat("%d of %d started: %d running, %d paused, %d completed, "
                       "%d stopped, %d failed",
                       counts.started, SearchTrialCount(search.spec()), counts.running,
                       counts.paused, counts.completed, counts.stopped, counts.failed)});
  const v1::SearchTrial* best = BestTrial(search);
  fields.AddRow(
      {"BEST",
       best == nullptr
           ? "-"
           : absl::StrCat(DescribeTrial(search, *best), ": ", MetricName(search), " ",
                          BestMetricCell(*best), ", job ",
                          BestIsPlaced(*best) ? best->best_job_id() : LatestJob(*best))});
  fields.AddRow({"CREATED", LocalTime(search.created_unix_ms(), ctx)});
  fields.AddRow({"UPDATED", LocalTime(search.updated_unix_ms(), ctx)});
  return fields.Render();
}

std::string FormatSearchReportTable(const v1::Search& search) {
  const std::vector<std::string> keys = ParameterKeys(search);
  std::vector<std::string> header = {"BEST", "TRIAL"};
  header.insert(header.end(), keys.begin(), keys.end());
  for (const char* column : {"STATUS", "RUNG", "STEPS"}) header.push_back(column);
  header.push_back(absl::AsciiStrToUpper(MetricName(search)));
  header.push_back("AT_STEP");
  header.push_back("JOB");
  Table table(std::move(header));
  for (const v1::SearchTrial& trial : search.trials()) {
    std::vector<std::string> row = {trial.index() == search.best_trial() ? "*" : "",
                                    absl::StrCat(trial.index())};
    for (const std::string& key : keys) row.push_back(OrDash(ParameterValue(trial, key)));
    row.push_back(OrDash(trial.status()));
    row.push_back(absl::StrCat(trial.rung()));
    row.push_back(absl::StrCat(trial.steps()));
    row.push_back(BestMetricCell(trial));
    row.push_back(BestIsPlaced(trial) ? absl::StrCat(trial.best_step()) : "-");
    const int64_t job = LatestJob(trial);
    row.push_back(job != 0 ? absl::StrCat(job) : "-");
    table.AddRow(std::move(row));
  }
  return table.Render();
}

std::string FormatSearchReportCsv(const v1::Search& search) {
  const std::vector<std::string> keys = ParameterKeys(search);
  std::vector<std::string> header = {"trial"};
  for (const std::string& key : keys) header.push_back(CsvField(key));
  std::string out = absl::StrCat(absl::StrJoin(header, ","),
                                 ",status,rung,steps,best_metric,best,state,job_ids,"
                                 "rung_metrics,best_rung,best_step,best_job_id\n");
  for (const v1::SearchTrial& trial : search.trials()) {
    std::vector<std::string> row = {absl::StrCat(trial.index())};
    for (const std::string& key : keys)
      row.push_back(CsvField(ParameterValue(trial, key)));
    std::vector<std::string> rung_metrics;
    for (double m : trial.rung_metrics()) rung_metrics.push_back(ExactDouble(m));
    absl::StrAppend(&out, absl::StrJoin(row, ","), ",", CsvField(trial.status()), ",",
                    trial.rung(), ",", trial.steps(), ",",
                    trial.has_best_metric() ? ExactDouble(trial.best_metric()) : "", ",",
                    trial.index() == search.best_trial() ? "true" : "false", ",",
                    JobStateName(trial.state()), ",", absl::StrJoin(trial.job_ids(), " "),
                    ",", absl::StrJoin(rung_metrics, " "), ",");
    if (BestIsPlaced(trial)) {
      absl::StrAppend(&out, trial.best_rung(), ",", trial.best_step(), ",",
                      trial.best_job_id());
    } else {
      absl::StrAppend(&out, ",,");
    }
    out += "\n";
  }
  return out;
}

std::string FormatBestTrial(const v1::Search& search, const v1::SearchTrial& trial) {
  std::string out = absl::StrCat("best trial ", trial.index(), " of search ", search.id(),
                                 ": ", MetricName(search), " ", BestMetricCell(trial));
  if (BestIsPlaced(trial)) {
    absl::StrAppend(&out, " at rung ", trial.best_rung(), ", step ", trial.best_step(),
                    ", job ", trial.best_job_id());
  }
  absl::StrAppend(&out, " (", OrDash(trial.status()));
  // The trial went on past the rung where it scored best (or that is not
  // known): where it is now.
  if (!BestIsPlaced(trial) || trial.best_job_id() != LatestJob(trial)) {
    absl::StrAppend(&out, "; latest rung ", trial.rung(), ", job ", LatestJob(trial));
  }
  out += ")\n";
  for (const std::string& key : ParameterKeys(search)) {
    if (!trial.parameters().contains(key)) continue;
    absl::StrAppend(&out, "  ", key, ": ", ParameterValue(trial, key), "\n");
  }
  return out;
}

std::string FormatTrialChange(const v1::Search& search, const v1::SearchTrial& trial,
                              bool promoted) {
  const std::string job =
      absl::StrCat("job ", LatestJob(trial), " ", JobStateName(trial.state()));
  std::string change;
  if (trial.status().empty() || trial.status() == "running") {
    change = absl::StrCat(promoted ? "promoted, " : "", job);
  } else if (trial.rung() >= 0 && trial.rung() < trial.rung_metrics_size()) {
    change = absl::StrCat(trial.status(), ", ", MetricName(search), " ",
                          MetricCell(trial.rung_metrics(trial.rung())));
  } else {
    change = absl::StrCat(trial.status(), ", ", job);
  }
  return Sanitize(
      absl::StrCat(DescribeTrial(search, trial), " rung ", trial.rung(), ": ", change));
}

std::string FormatSearchProgress(const v1::Search& search) {
  const TrialCounts counts = CountTrials(search);
  std::string out = absl::StrCat("search ", search.id(), ": ", counts.started, "/",
                                 SearchTrialCount(search.spec()), " trials started, ",
                                 counts.running, " running");
  if (counts.paused > 0) absl::StrAppend(&out, ", ", counts.paused, " paused");
  absl::StrAppend(&out, ", ", counts.completed, " completed, ", counts.stopped,
                  " stopped, ", counts.failed, " failed");
  const std::string best = BestSummary(search, false);
  if (!best.empty()) absl::StrAppend(&out, "; ", best);
  return out;
}

std::string FormatSearchEnd(const v1::Search& search, absl::Duration took) {
  const TrialCounts counts = CountTrials(search);
  const std::string best = BestSummary(search, true);
  if (search.state() == v1::SEARCH_STATE_SUCCEEDED) {
    return absl::StrCat("search ", search.id(), " SUCCEEDED in ", HumanDuration(took),
                        ": ", Trials(counts.started), best.empty() ? "" : "; ", best,
                        "; see tessctl search report ", search.id());
  }
  return absl::StrCat("search ", search.id(), " ", SearchStateName(search.state()),
                      " after ", HumanDuration(took), search.reason().empty() ? "" : ": ",
                      Sanitize(search.reason()), " (", Trials(counts.started), ", ",
                      counts.failed, " failed", best.empty() ? "" : "; ", best, ")");
}

json SearchTrialToJson(const v1::Search& search, const v1::SearchTrial& trial) {
  json parameters = json::object();
  for (const std::string& key : ParameterKeys(search)) {
    if (trial.parameters().contains(key)) parameters[key] = ParameterValue(trial, key);
  }
  json rung_metrics = json::array();
  for (double m : trial.rung_metrics()) rung_metrics.push_back(m);
  return {{"trial", trial.index()},
          {"parameters", std::move(parameters)},
          {"status", trial.status()},
          {"state", JobStateName(trial.state())},
          {"rung", trial.rung()},
          {"steps", trial.steps()},
          {"best_metric", trial.has_best_metric() ? json(trial.best_metric()) : json()},
          {"best_rung", BestPlaceJson(trial, trial.best_rung())},
          {"best_step", BestPlaceJson(trial, trial.best_step())},
          {"best_job_id", BestPlaceJson(trial, trial.best_job_id())},
          {"rung_metrics", std::move(rung_metrics)},
          {"promoted", trial.promoted()},
          {"job_ids", JsonIds(trial.job_ids())},
          {"best", trial.index() == search.best_trial()}};
}

json SearchToJson(const v1::Search& search, bool detailed) {
  const TrialCounts counts = CountTrials(search);
  json out = {{"id", search.id()},
              {"name", search.name()},
              {"owner", search.owner()},
              {"state", SearchStateName(search.state())},
              {"reason", search.reason()},
              {"method", search.spec().search().method()},
              {"metric", search.spec().search().metric()},
              {"mode", ModeName(search)},
              {"max_trials", SearchTrialCount(search.spec())},
              {"best_trial", BestTrialJson(search)},
              {"created", Rfc3339(search.created_unix_ms())},
              {"created_unix_ms", search.created_unix_ms()},
              {"updated", Rfc3339(search.updated_unix_ms())},
              {"updated_unix_ms", search.updated_unix_ms()},
              {"counts",
               {{"started", counts.started},
                {"running", counts.running},
                {"paused", counts.paused},
                {"completed", counts.completed},
                {"stopped", counts.stopped},
                {"failed", counts.failed}}},
              {"spec", ProtoToJson(search.spec())}};
  if (detailed) {
    json trials = json::array();
    for (const v1::SearchTrial& t : search.trials()) {
      trials.push_back(SearchTrialToJson(search, t));
    }
    out["trials"] = std::move(trials);
    out["spec_yaml"] = search.spec_yaml();
  }
  return out;
}

json SearchReportToJson(const v1::Search& search) {
  json trials = json::array();
  for (const v1::SearchTrial& t : search.trials()) {
    trials.push_back(SearchTrialToJson(search, t));
  }
  return {{"search_id", search.id()},
          {"name", search.name()},
          {"state", SearchStateName(search.state())},
          {"method", search.spec().search().method()},
          {"metric", search.spec().search().metric()},
          {"mode", ModeName(search)},
          {"best_trial", BestTrialJson(search)},
          {"trials", std::move(trials)}};
}

}  // namespace tessera::cli
