#include "coordinator/core/search_view.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "common/search_spec.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using Outcome = SearchJobRecord::Outcome;

// Whether metric `a` is better than `b` (NaN is worse than any number).
bool BetterMetric(double a, double b, bool maximize) {
  if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
  return maximize ? a > b : a < b;
}

// The status of a trial whose latest row is `latest`.
const char* TrialStatus(const SearchJobRecord& latest, int32_t last_rung,
                        bool search_running) {
  switch (latest.outcome) {
    case Outcome::kRunning:
      return search_running ? "running" : "stopped";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kDone:
      if (latest.rung == last_rung) return "completed";
      return search_running ? "paused" : "stopped";
  }
  return "running";
}

// One trial from its rows, in rung order.
v1::SearchTrial MakeTrial(const SearchRecord& search,
                          const std::vector<const SearchJobRecord*>& rows,
                          const std::map<int64_t, v1::JobState>& live,
                          int32_t last_rung) {
  const v1::SearchConfig& config = search.spec.search();
  const bool maximize = SearchMaximizes(config);
  v1::SearchTrial trial;
  trial.set_index(rows.front()->trial);
  for (const auto& [key, value] : SearchTrialParameters(config, trial.index())) {
    (*trial.mutable_parameters())[key] = value;
  }
  // The row whose metric is the trial's best: on a tie the later rung, the
  // longer-trained model.
  const SearchJobRecord* best = nullptr;
  for (const SearchJobRecord* row : rows) {
    if (row->job_id != 0) trial.add_job_ids(row->job_id);
    if (row->outcome != Outcome::kDone || !row->metric.has_value()) continue;
    trial.add_rung_metrics(*row->metric);
    trial.set_steps(std::max(trial.steps(), row->steps));
    if (best == nullptr || !BetterMetric(*best->metric, *row->metric, maximize)) {
      best = row;
    }
  }
  if (best != nullptr) {
    trial.set_best_metric(*best->metric);
    trial.set_best_rung(best->rung);
    trial.set_best_job_id(best->job_id);
    trial.set_best_step(best->steps);
  }
  const SearchJobRecord& latest = *rows.back();
  trial.set_rung(latest.rung);
  trial.set_promoted(latest.rung > 0);
  if (latest.outcome != Outcome::kRunning) {
    trial.set_state(latest.job_state);
  } else if (latest.job_id != 0) {
    auto it = live.find(latest.job_id);
    trial.set_state(it != live.end() ? it->second : v1::JOB_STATE_QUEUED);
  }
  trial.set_status(
      TrialStatus(latest, last_rung, search.state == v1::SEARCH_STATE_RUNNING));
  return trial;
}

// Whether trial `a` ranks above trial `b` for the search's best.
bool BetterTrial(const v1::SearchTrial& a, const v1::SearchTrial& b, bool maximize) {
  if (a.best_metric() != b.best_metric() &&
      !(std::isnan(a.best_metric()) && std::isnan(b.best_metric()))) {
    return BetterMetric(a.best_metric(), b.best_metric(), maximize);
  }
  if (a.rung() != b.rung()) return a.rung() > b.rung();
  return a.index() < b.index();
}

}  // namespace

v1::Search SearchToProto(const SearchRecord& search,
                         const std::vector<SearchJobRecord>& jobs,
                         const std::map<int64_t, v1::JobState>& live) {
  v1::Search out;
  out.set_id(search.id);
  out.set_name(search.name);
  out.set_state(search.state);
  out.set_reason(search.reason);
  *out.mutable_spec() = search.spec;
  out.set_spec_yaml(search.spec_yaml);
  out.set_created_unix_ms(search.created_unix_ms);
  out.set_updated_unix_ms(search.updated_unix_ms);
  out.set_owner(search.owner);
  out.set_best_trial(-1);
  const int32_t last_rung =
      static_cast<int32_t>(SearchRungLengths(search.spec.search()).size()) - 1;
  const bool maximize = SearchMaximizes(search.spec.search());
  std::optional<v1::SearchTrial> best;
  for (size_t i = 0; i < jobs.size();) {
    std::vector<const SearchJobRecord*> rows;
    for (size_t j = i; j < jobs.size() && jobs[j].trial == jobs[i].trial; ++j) {
      rows.push_back(&jobs[j]);
    }
    i += rows.size();
    v1::SearchTrial trial = MakeTrial(search, rows, live, last_rung);
    if (trial.has_best_metric() && (!best || BetterTrial(trial, *best, maximize))) {
      best = trial;
    }
    *out.add_trials() = std::move(trial);
  }
  if (best.has_value()) out.set_best_trial(best->index());
  return out;
}

}  // namespace tessera
