#include "coordinator/core/search_manager.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/core/asha.h"
#include "coordinator/core/search_view.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using Outcome = SearchJobRecord::Outcome;

// Points per metric query; a rung's metric is one series of one job.
constexpr int32_t kMetricPage = 100000;
constexpr size_t kMaxRequestIdBytes = 128;
constexpr size_t kMaxSpecYamlBytes = 64 * 1024;

std::string JobRequestId(int64_t search_id, int32_t trial, int32_t rung) {
  return absl::StrCat("search:", search_id, ":trial:", trial, ":rung:", rung);
}

// A search's own errors keep the store's codes, except that a store that
// cannot take writes is reported as retryable.
absl::Status Retryable(const absl::Status& s, absl::string_view what) {
  if (absl::IsResourceExhausted(s) || absl::IsInternal(s) || absl::IsDataLoss(s)) {
    return absl::UnavailableError(absl::StrCat(what, ", try again: ", s.message()));
  }
  return s;
}

// A submit that no retry can make succeed: the job's spec or priority is
// refused.
bool NeverSubmits(const absl::Status& s) {
  return absl::IsInvalidArgument(s) || absl::IsPermissionDenied(s);
}

// Whether point `a` comes after `b`: a later step, then a later attempt,
// then a lower rank.
bool Later(const v1::MetricPoint& a, const v1::MetricPoint& b) {
  return std::make_tuple(a.step(), a.attempt(), -a.rank()) >
         std::make_tuple(b.step(), b.attempt(), -b.rank());
}

// The searcher's state, from the search's rows.
Asha BuildAsha(const v1::SearchSpec& spec, const std::vector<SearchJobRecord>& rows) {
  const v1::SearchConfig& config = spec.search();
  Asha::Options options;
  options.rungs = static_cast<int32_t>(SearchRungLengths(config).size());
  options.reduction_factor = SearchReductionFactor(config);
  options.max_trials = SearchTrialCount(spec);
  options.maximize = SearchMaximizes(config);
  Asha asha(options);
  for (const SearchJobRecord& row : rows) {
    switch (row.outcome) {
      case Outcome::kRunning:
        asha.Started(row.trial, row.rung);
        break;
      case Outcome::kDone:
        asha.Finished(row.trial, row.rung,
                      row.metric.value_or(std::numeric_limits<double>::quiet_NaN()));
        break;
      case Outcome::kFailed:
        asha.Failed(row.trial, row.rung);
        break;
    }
  }
  return asha;
}

}  // namespace

SearchManager::SearchManager(Store* store, JobRequests* jobs, const Clock* clock,
                             Options options)
    : store_(store), jobs_(jobs), clock_(clock), options_(std::move(options)) {}

absl::Status SearchManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<SearchRecord> searches, store_->ListSearches());
  absl::MutexLock lock(&mu_);
  for (const SearchRecord& s : searches) {
    if (s.state != v1::SEARCH_STATE_RUNNING) continue;
    running_.insert(s.id);
    // Jobs decided before a crash are submitted now, under their request ids.
    absl::Status refreshed = RefreshLocked(s).status();
    if (!refreshed.ok()) spdlog::warn("search {}: {}", s.id, refreshed.ToString());
  }
  if (!running_.empty()) spdlog::info("{} searches still running", running_.size());
  return absl::OkStatus();
}

absl::Status SearchManager::CheckSlots(const v1::SearchSpec& spec,
                                       const std::vector<SearchTrialJob>& trials) const {
  if (!options_.cluster_slots || trials.empty()) return absl::OkStatus();
  int64_t smallest = std::numeric_limits<int32_t>::max();
  for (const SearchTrialJob& t : trials) {
    smallest = std::min<int64_t>(smallest, t.job.world_size());
  }
  const int64_t concurrent = std::max(1, spec.search().max_concurrent());
  const int64_t slots = options_.cluster_slots();
  if (concurrent * smallest <= slots) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("search.max_concurrent: ", concurrent,
                   " trials at once need at least ", concurrent * smallest,
                   " slots (world_size ", smallest, " each); the cluster has ", slots));
}

absl::StatusOr<v1::SubmitSearchResponse> SearchManager::Submit(
    const v1::SearchSpec& spec, const std::string& spec_yaml,
    const std::string& client_request_id, const std::string& owner) {
  ASSIGN_OR_RETURN(std::vector<SearchTrialJob> trials,
                   ExpandSearch(spec, options_.limits));
  if (client_request_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError("client_request_id: longer than 128 characters");
  }
  if (spec_yaml.size() > kMaxSpecYamlBytes) {
    return absl::InvalidArgumentError("spec_yaml: larger than 64 KiB");
  }
  RETURN_IF_ERROR(CheckSlots(spec, trials));
  SearchRecord record;
  record.name = spec.name();
  record.state = v1::SEARCH_STATE_RUNNING;
  record.reason = "submitted";
  record.spec = spec;
  record.spec_yaml = spec_yaml;
  record.client_request_id = client_request_id;
  record.owner = owner;
  record.created_unix_ms = absl::ToUnixMillis(clock_->Now());
  record.updated_unix_ms = record.created_unix_ms;
  absl::StatusOr<int64_t> created = store_->CreateSearch(record);
  if (!created.ok()) return Retryable(created.status(), "search not stored");
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(SearchRecord stored, store_->GetSearch(*created));
    if (stored.state == v1::SEARCH_STATE_RUNNING) {
      if (running_.insert(stored.id).second) {
        spdlog::info("search {} ({}) submitted: {} {}, {} trials, {} at a time",
                     stored.id, stored.name, spec.search().method(),
                     spec.search().metric(), trials.size(),
                     std::max(1, spec.search().max_concurrent()));
      }
      // The search is stored; the monitor retries what could not start now.
      absl::Status advanced = AdvanceLocked(stored);
      if (!advanced.ok()) spdlog::warn("search {}: {}", stored.id, advanced.ToString());
    }
  }
  jobs_->changes().Notify();
  v1::SubmitSearchResponse response;
  response.set_search_id(*created);
  response.set_max_trials(static_cast<int32_t>(trials.size()));
  return response;
}

absl::Status SearchManager::SubmitLocked(const SearchRecord& search,
                                         SearchJobRecord& row) {
  absl::StatusOr<SearchTrialJob> trial =
      MakeSearchTrial(search.spec, search.id, row.trial, options_.limits);
  absl::StatusOr<int64_t> id = absl::UnknownError("not submitted");
  if (trial.ok()) {
    JobOrigin origin;
    origin.owner = search.owner;
    id = jobs_->Submit(
        SearchRungJob(*trial, SearchRungLengths(search.spec.search()), row.rung),
        /*spec_yaml=*/"", JobRequestId(search.id, row.trial, row.rung), origin);
  } else {
    id = trial.status();
  }
  row.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  if (id.ok()) {
    row.job_id = *id;
    spdlog::info("search {} trial {} rung {} submitted as job {}", search.id, row.trial,
                 row.rung, *id);
    return store_->PutSearchJob(row);
  }
  if (!NeverSubmits(id.status())) return id.status();
  spdlog::warn("search {} trial {} rung {}: not submitted: {}", search.id, row.trial,
               row.rung, id.status().ToString());
  row.outcome = Outcome::kFailed;
  row.reason = absl::StrCat("not submitted: ", id.status().message());
  return store_->PutSearchJob(row);
}

absl::StatusOr<std::optional<v1::MetricPoint>> SearchManager::LastMetric(
    int64_t job_id, const std::string& name) {
  std::optional<v1::MetricPoint> last;
  v1::GetMetricsRequest query;
  query.set_job_id(job_id);
  query.set_name(name);
  query.set_limit(kMetricPage);
  while (true) {
    ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points,
                     jobs_->GetMetrics(Caller::Admin(), query));
    for (v1::MetricPoint& p : points) {
      if (!last.has_value() || Later(p, *last)) last = std::move(p);
    }
    // A full page: the rest follows its last step.
    if (points.size() < static_cast<size_t>(kMetricPage) ||
        last->step() <= query.after_step()) {
      return last;
    }
    query.set_after_step(last->step());
  }
}

absl::Status SearchManager::UpdateOutcomeLocked(const SearchRecord& search,
                                                SearchJobRecord& row) {
  absl::StatusOr<v1::Job> job = jobs_->GetJob(Caller::Admin(), row.job_id);
  if (!job.ok() && !absl::IsNotFound(job.status())) return job.status();
  if (job.ok() && !IsTerminal(job->state())) return absl::OkStatus();
  const std::string& metric = search.spec.search().metric();
  row.outcome = Outcome::kFailed;
  if (!job.ok()) {
    row.reason = absl::StrCat("job ", row.job_id, " is gone");
  } else if (job->state() != v1::JOB_STATE_SUCCEEDED) {
    row.job_state = job->state();
    row.reason = absl::StrCat(JobStateName(job->state()), ": ", job->reason());
  } else {
    row.job_state = job->state();
    ASSIGN_OR_RETURN(std::optional<v1::MetricPoint> last, LastMetric(row.job_id, metric));
    if (last.has_value()) {
      row.outcome = Outcome::kDone;
      row.metric = last->value();
      row.steps = last->step();
    } else {
      row.reason = absl::StrCat("ended without reporting ", metric);
    }
  }
  row.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  RETURN_IF_ERROR(store_->PutSearchJob(row));
  if (row.outcome == Outcome::kDone) {
    spdlog::info("search {} trial {} rung {} (job {}): {} = {} at step {}", search.id,
                 row.trial, row.rung, row.job_id, metric, *row.metric, row.steps);
  } else {
    spdlog::info("search {} trial {} rung {} (job {}) failed: {}", search.id, row.trial,
                 row.rung, row.job_id, row.reason);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SearchJobRecord>> SearchManager::RefreshLocked(
    const SearchRecord& search) {
  ASSIGN_OR_RETURN(std::vector<SearchJobRecord> rows, store_->ListSearchJobs(search.id));
  for (SearchJobRecord& row : rows) {
    if (row.outcome != Outcome::kRunning) continue;
    if (row.job_id == 0) {
      RETURN_IF_ERROR(SubmitLocked(search, row));
    } else {
      RETURN_IF_ERROR(UpdateOutcomeLocked(search, row));
    }
  }
  return rows;
}

absl::Status SearchManager::AdvanceLocked(SearchRecord& search) {
  ASSIGN_OR_RETURN(std::vector<SearchJobRecord> rows, RefreshLocked(search));
  Asha asha = BuildAsha(search.spec, rows);
  const int32_t max_concurrent = std::max(1, search.spec.search().max_concurrent());
  while (asha.running() < max_concurrent) {
    const Asha::Decision next = asha.Next();
    if (next.kind == Asha::Decision::Kind::kDone) return FinishLocked(search, rows);
    if (next.kind == Asha::Decision::Kind::kWait) break;
    SearchJobRecord row;
    row.search_id = search.id;
    row.trial = next.trial;
    row.rung = next.rung;
    row.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
    // Decided first: after a crash this job is submitted, not another.
    RETURN_IF_ERROR(store_->PutSearchJob(row));
    asha.Started(row.trial, row.rung);
    rows.push_back(row);
    RETURN_IF_ERROR(SubmitLocked(search, rows.back()));
    if (rows.back().outcome == Outcome::kFailed) asha.Failed(row.trial, row.rung);
  }
  return absl::OkStatus();
}

absl::Status SearchManager::FinishLocked(SearchRecord& search,
                                         const std::vector<SearchJobRecord>& rows) {
  const v1::Search view = SearchToProto(search, rows, {});
  const std::string& metric = search.spec.search().metric();
  if (view.best_trial() >= 0) {
    const v1::SearchTrial* best = nullptr;
    for (const v1::SearchTrial& t : view.trials()) {
      if (t.index() == view.best_trial()) best = &t;
    }
    search.state = v1::SEARCH_STATE_SUCCEEDED;
    search.reason =
        absl::StrCat(view.trials_size(), " trials; best trial ", view.best_trial(), ": ",
                     metric, " ", best->best_metric(), " at rung ", best->best_rung(),
                     ", step ", best->best_step());
  } else {
    search.state = v1::SEARCH_STATE_FAILED;
    search.reason = absl::StrCat(view.trials_size(), " trials; none reported ", metric);
  }
  search.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  RETURN_IF_ERROR(store_->UpdateSearch(search));
  running_.erase(search.id);
  spdlog::info("search {} ended: {}", search.id, search.reason);
  jobs_->changes().Notify();
  return absl::OkStatus();
}

void SearchManager::Tick() {
  absl::MutexLock lock(&mu_);
  const std::set<int64_t> running = running_;
  for (int64_t id : running) {
    absl::StatusOr<SearchRecord> search = store_->GetSearch(id);
    absl::Status status = search.status();
    if (search.ok()) {
      if (search->state != v1::SEARCH_STATE_RUNNING) {
        running_.erase(id);
        continue;
      }
      status = AdvanceLocked(*search);
    }
    if (!status.ok()) {
      // Retried on the next tick; a store that is full recovers by itself.
      spdlog::warn("search {}: cannot advance: {}", id, status.ToString());
    }
  }
}

std::map<std::string, int64_t> SearchManager::RunningTrialsByStatus() {
  std::map<std::string, int64_t> out = {
      {"running", 0}, {"paused", 0}, {"completed", 0}, {"failed", 0}};
  std::set<int64_t> running;
  {
    absl::MutexLock lock(&mu_);
    running = running_;
  }
  for (int64_t id : running) {
    absl::StatusOr<SearchRecord> search = store_->GetSearch(id);
    if (!search.ok() || search->state != v1::SEARCH_STATE_RUNNING) continue;
    absl::StatusOr<v1::Search> view = Expand(*search);
    if (!view.ok()) continue;
    for (const v1::SearchTrial& trial : view->trials()) ++out[trial.status()];
  }
  return out;
}

absl::StatusOr<SearchRecord> SearchManager::Visible(const Caller& caller,
                                                    int64_t search_id) {
  absl::StatusOr<SearchRecord> search = store_->GetSearch(search_id);
  if ((search.ok() && !caller.MaySee(search->owner)) ||
      absl::IsNotFound(search.status())) {
    return absl::NotFoundError(absl::StrCat("search ", search_id, " not found"));
  }
  return search;
}

absl::StatusOr<v1::SearchState> SearchManager::Cancel(const Caller& caller,
                                                      int64_t search_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(SearchRecord search, Visible(caller, search_id));
  if (search.state != v1::SEARCH_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("search ", search_id,
                     " has already ended: ", v1::SearchState_Name(search.state)));
  }
  ASSIGN_OR_RETURN(std::vector<SearchJobRecord> rows, store_->ListSearchJobs(search_id));
  // A job decided but not submitted before a crash is submitted now (or found
  // under its request id), so that it is cancelled below, not left to run.
  for (SearchJobRecord& row : rows) {
    if (row.outcome != Outcome::kRunning || row.job_id != 0) continue;
    absl::Status submitted = SubmitLocked(search, row);
    if (!submitted.ok()) spdlog::warn("search {}: {}", search_id, submitted.ToString());
  }
  search.state = v1::SEARCH_STATE_CANCELLED;
  search.reason = "cancelled by user";
  search.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  // Stored first, so that a crash in between never starts more jobs.
  absl::Status updated = store_->UpdateSearch(search);
  if (!updated.ok()) return Retryable(updated, "search not cancelled");
  running_.erase(search_id);
  for (const SearchJobRecord& row : rows) {
    if (row.outcome != Outcome::kRunning || row.job_id == 0) continue;
    absl::StatusOr<v1::JobState> cancelled = jobs_->CancelJob(caller, row.job_id);
    // A job that ended meanwhile is fine.
    if (!cancelled.ok() && !absl::IsFailedPrecondition(cancelled.status())) {
      spdlog::warn("search {}: cancelling job {}: {}", search_id, row.job_id,
                   cancelled.status().ToString());
    }
  }
  spdlog::info("search {} cancelled", search_id);
  jobs_->changes().Notify();
  return search.state;
}

absl::StatusOr<v1::Search> SearchManager::Expand(const SearchRecord& search) {
  ASSIGN_OR_RETURN(std::vector<SearchJobRecord> rows, store_->ListSearchJobs(search.id));
  std::map<int64_t, v1::JobState> live;
  for (const SearchJobRecord& row : rows) {
    if (row.outcome != Outcome::kRunning || row.job_id == 0) continue;
    absl::StatusOr<v1::Job> job = jobs_->GetJob(Caller::Admin(), row.job_id);
    if (job.ok()) live[row.job_id] = job->state();
  }
  return SearchToProto(search, rows, live);
}

absl::StatusOr<v1::Search> SearchManager::Get(const Caller& caller, int64_t search_id) {
  ASSIGN_OR_RETURN(SearchRecord search, Visible(caller, search_id));
  return Expand(search);
}

absl::StatusOr<std::vector<v1::Search>> SearchManager::List(const Caller& caller) {
  ASSIGN_OR_RETURN(std::vector<SearchRecord> searches, store_->ListSearches());
  std::vector<v1::Search> out;
  for (const SearchRecord& s : searches) {
    if (!caller.MaySee(s.owner)) continue;
    absl::StatusOr<v1::Search> full = Expand(s);
    out.push_back(full.ok() ? *std::move(full) : SearchToProto(s, {}, {}));
  }
  return out;
}

}  // namespace tessera
