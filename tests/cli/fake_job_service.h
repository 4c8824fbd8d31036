// An in-memory tessera.v1.JobService for tessctl's tests, served in-process.
// GetJob walks through a per-job script of states, and GetSweep and GetSearch
// through a per-sweep or per-search script of snapshots, so tests can drive
// `wait` and `--follow`; searches are otherwise answered as submitted or
// added. Submits, and GetSearch, can be told to fail with UNAVAILABLE first.
// Every call's "authorization" metadata is recorded.
//
// Thread-safety: thread-safe (one mutex); gRPC calls handlers concurrently.
#ifndef TESSERA_TESTS_CLI_FAKE_JOB_SERVICE_H_
#define TESSERA_TESTS_CLI_FAKE_JOB_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/search_spec.h"
#include "common/sweep_spec.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera::cli::fakes {

namespace v1 = tessera::v1;

class FakeJobService final : public v1::JobService::Service {
 public:
  // What a call carried as "authorization" ("<none>" without one), per call.
  static constexpr char kNoAuthorization[] = "<none>";

  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    submits_.push_back(*request);
    if (unavailable_submits_ > 0) {
      --unavailable_submits_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    if (auto it = by_request_id_.find(request->client_request_id());
        it != by_request_id_.end()) {
      response->set_job_id(it->second);
      return grpc::Status::OK;
    }
    v1::Job job;
    job.set_id(next_id_++);
    job.set_name(request->spec().name());
    job.set_state(v1::JOB_STATE_QUEUED);
    *job.mutable_spec() = request->spec();
    job.set_spec_yaml(request->spec_yaml());
    jobs_[job.id()] = job;
    by_request_id_[request->client_request_id()] = job.id();
    response->set_job_id(job.id());
    return grpc::Status::OK;
  }

  // Honours state, sweep_id and limit unless IgnoreListFilters() was called.
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    list_requests_.push_back(*request);
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
      const v1::Job& job = it->second;
      if (!ignore_list_filters_) {
        if (request->state() != v1::JOB_STATE_UNSPECIFIED &&
            job.state() != request->state()) {
          continue;
        }
        if (request->sweep_id() != 0 && job.sweep_id() != request->sweep_id()) continue;
        if (request->limit() > 0 && response->jobs_size() >= request->limit()) break;
      }
      *response->add_jobs() = job;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    ++get_job_calls_;
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", request->job_id(), " not found"));
    }
    std::deque<v1::JobState>& script = state_scripts_[it->first];
    if (!script.empty()) {
      it->second.set_state(script.front());
      if (script.size() > 1) script.pop_front();
    }
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status GetMetrics(grpc::ServerContext* context,
                          const v1::GetMetricsRequest* request,
                          v1::GetMetricsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    metrics_requests_.push_back(*request);
    const int limit = request->limit() > 0 ? request->limit() : 10000;
    for (const v1::MetricPoint& p : points_) {  // kept sorted by step
      if (p.step() <= request->after_step()) continue;
      if (!request->name().empty() && p.name() != request->name()) continue;
      if (response->points_size() >= limit) break;
      *response->add_points() = p;
    }
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    for (const v1::Worker& w : workers_) *response->add_workers() = w;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end())
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    if (it->second.state() == v1::JOB_STATE_SUCCEEDED) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", it->first, " already ended: SUCCEEDED"));
    }
    it->second.set_state(v1::JOB_STATE_CANCELLED);
    response->set_state(v1::JOB_STATE_CANCELLED);
    return grpc::Status::OK;
  }

  // Serves `log_` in pieces of at most 4 bytes; complete once all was read.
  grpc::Status GetLogs(grpc::ServerContext* context, const v1::GetLogsRequest* request,
                       v1::GetLogsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    if (!jobs_.contains(request->job_id())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    }
    const size_t offset = std::min<size_t>(request->offset(), log_.size());
    response->set_data(log_.substr(offset, 4));
    response->set_next_offset(offset + response->data().size());
    response->set_attempt(1);
    response->set_complete(response->data().empty());
    return grpc::Status::OK;
  }

  // Stores the sweep with its points expanded as the coordinator would
  // (ExpandSweep), none submitted yet.
  grpc::Status SubmitSweep(grpc::ServerContext* context,
                           const v1::SubmitSweepRequest* request,
                           v1::SubmitSweepResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    sweep_submits_.push_back(*request);
    if (unavailable_submits_ > 0) {
      --unavailable_submits_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    if (auto it = sweep_by_request_id_.find(request->client_request_id());
        it != sweep_by_request_id_.end()) {
      response->set_sweep_id(it->second);
      response->set_points(sweeps_[it->second].points_size());
      return grpc::Status::OK;
    }
    absl::StatusOr<std::vector<SweepJob>> points = ExpandSweep(request->spec(), {});
    if (!points.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(points.status().message()));
    }
    v1::Sweep sweep;
    sweep.set_id(next_sweep_id_++);
    sweep.set_name(request->spec().name());
    sweep.set_state(v1::SWEEP_STATE_RUNNING);
    *sweep.mutable_spec() = request->spec();
    sweep.set_spec_yaml(request->spec_yaml());
    for (const SweepJob& p : *points) *sweep.add_points() = p.point;
    sweeps_[sweep.id()] = sweep;
    sweep_by_request_id_[request->client_request_id()] = sweep.id();
    response->set_sweep_id(sweep.id());
    response->set_points(sweep.points_size());
    return grpc::Status::OK;
  }

  grpc::Status ListSweeps(grpc::ServerContext* context, const v1::ListSweepsRequest*,
                          v1::ListSweepsResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    for (auto it = sweeps_.rbegin(); it != sweeps_.rend(); ++it) {
      *response->add_sweeps() = it->second;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetSweep(grpc::ServerContext* context, const v1::GetSweepRequest* request,
                        v1::GetSweepResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    auto it = sweeps_.find(request->sweep_id());
    if (it == sweeps_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("sweep ", request->sweep_id(), " not found"));
    }
    std::deque<v1::Sweep>& script = sweep_scripts_[it->first];
    if (!script.empty()) {
      it->second = script.front();
      if (script.size() > 1) script.pop_front();
    }
    *response->mutable_sweep() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status GetSweepReport(grpc::ServerContext* context,
                              const v1::GetSweepReportRequest* request,
                              v1::GetSweepReportResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    auto it = reports_.find(request->sweep_id());
    if (it == reports_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such sweep");
    }
    *response->mutable_report() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status CancelSweep(grpc::ServerContext* context,
                           const v1::CancelSweepRequest* request,
                           v1::CancelSweepResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    auto it = sweeps_.find(request->sweep_id());
    if (it == sweeps_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such sweep");
    }
    if (it->second.state() != v1::SWEEP_STATE_RUNNING) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("sweep ", it->first, " already ended"));
    }
    it->second.set_state(v1::SWEEP_STATE_CANCELLED);
    response->set_state(v1::SWEEP_STATE_CANCELLED);
    return grpc::Status::OK;
  }

  // Stores the search, none of its trials started; answers the trial count
  // as the coordinator would (SearchTrialCount).
  grpc::Status SubmitSearch(grpc::ServerContext* context,
                            const v1::SubmitSearchRequest* request,
                            v1::SubmitSearchResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    search_submits_.push_back(*request);
    if (unavailable_submits_ > 0) {
      --unavailable_submits_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    if (auto it = search_by_request_id_.find(request->client_request_id());
        it != search_by_request_id_.end()) {
      response->set_search_id(it->second);
      response->set_max_trials(SearchTrialCount(searches_[it->second].spec()));
      return grpc::Status::OK;
    }
    v1::Search search;
    search.set_id(next_search_id_++);
    search.set_name(request->spec().name());
    search.set_state(v1::SEARCH_STATE_RUNNING);
    *search.mutable_spec() = request->spec();
    search.set_spec_yaml(request->spec_yaml());
    search.set_best_trial(-1);
    searches_[search.id()] = search;
    search_by_request_id_[request->client_request_id()] = search.id();
    response->set_search_id(search.id());
    response->set_max_trials(SearchTrialCount(request->spec()));
    return grpc::Status::OK;
  }

  grpc::Status ListSearches(grpc::ServerContext* context, const v1::ListSearchesRequest*,
                            v1::ListSearchesResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    for (auto it = searches_.rbegin(); it != searches_.rend(); ++it) {
      *response->add_searches() = it->second;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetSearch(grpc::ServerContext* context,
                         const v1::GetSearchRequest* request,
                         v1::GetSearchResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    if (unavailable_get_searches_ > 0) {
      --unavailable_get_searches_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    auto it = searches_.find(request->search_id());
    if (it == searches_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("search ", request->search_id(), " not found"));
    }
    std::deque<v1::Search>& script = search_scripts_[it->first];
    if (!script.empty()) {
      it->second = script.front();
      if (script.size() > 1) script.pop_front();
    }
    *response->mutable_search() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status CancelSearch(grpc::ServerContext* context,
                            const v1::CancelSearchRequest* request,
                            v1::CancelSearchResponse* response) override {
    absl::MutexLock lock(&mu_);
    Record(context);
    auto it = searches_.find(request->search_id());
    if (it == searches_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such search");
    }
    if (it->second.state() != v1::SEARCH_STATE_RUNNING) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("search ", it->first, " already ended"));
    }
    it->second.set_state(v1::SEARCH_STATE_CANCELLED);
    response->set_state(v1::SEARCH_STATE_CANCELLED);
    return grpc::Status::OK;
  }

  void SetLog(std::string log) {
    absl::MutexLock lock(&mu_);
    log_ = std::move(log);
  }
  void AddJob(const v1::Job& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job.id()] = job;
  }
  void ScriptStates(int64_t job_id, std::deque<v1::JobState> states) {
    absl::MutexLock lock(&mu_);
    state_scripts_[job_id] = std::move(states);
  }
  // Points must be added in step order.
  void AddPoint(int32_t attempt, int32_t rank, int64_t step, const std::string& name,
                double value, int64_t unix_ms = 0) {
    absl::MutexLock lock(&mu_);
    v1::MetricPoint p;
    p.set_attempt(attempt);
    p.set_rank(rank);
    p.set_step(step);
    p.set_name(name);
    p.set_value(value);
    p.set_unix_ms(unix_ms != 0 ? unix_ms : 1714564800000 + step);
    points_.push_back(p);
  }
  void AddWorker(const v1::Worker& worker) {
    absl::MutexLock lock(&mu_);
    workers_.push_back(worker);
  }
  void AddSweep(const v1::Sweep& sweep) {
    absl::MutexLock lock(&mu_);
    sweeps_[sweep.id()] = sweep;
  }
  // GetSweep answers these in turn, then keeps answering the last.
  void ScriptSweep(int64_t sweep_id, std::deque<v1::Sweep> snapshots) {
    absl::MutexLock lock(&mu_);
    sweep_scripts_[sweep_id] = std::move(snapshots);
  }
  void SetReport(const v1::SweepReport& report) {
    absl::MutexLock lock(&mu_);
    reports_[report.sweep_id()] = report;
  }
  void AddSearch(const v1::Search& search) {
    absl::MutexLock lock(&mu_);
    searches_[search.id()] = search;
  }
  // GetSearch answers these in turn (once the search exists, added or
  // submitted), then keeps answering the last.
  void ScriptSearch(int64_t search_id, std::deque<v1::Search> snapshots) {
    absl::MutexLock lock(&mu_);
    search_scripts_[search_id] = std::move(snapshots);
  }
  void FailNextGetSearches(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_get_searches_ = n;
  }
  void FailNextSubmits(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_submits_ = n;
  }
  void IgnoreListFilters() {
    absl::MutexLock lock(&mu_);
    ignore_list_filters_ = true;
  }

  std::vector<v1::SubmitJobRequest> submits() {
    absl::MutexLock lock(&mu_);
    return submits_;
  }
  std::vector<v1::SubmitSweepRequest> sweep_submits() {
    absl::MutexLock lock(&mu_);
    return sweep_submits_;
  }
  std::vector<v1::SubmitSearchRequest> search_submits() {
    absl::MutexLock lock(&mu_);
    return search_submits_;
  }
  std::vector<v1::ListJobsRequest> list_requests() {
    absl::MutexLock lock(&mu_);
    return list_requests_;
  }
  std::vector<v1::GetMetricsRequest> metrics_requests() {
    absl::MutexLock lock(&mu_);
    return metrics_requests_;
  }
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  int get_job_calls() {
    absl::MutexLock lock(&mu_);
    return get_job_calls_;
  }

 private:
  void Record(grpc::ServerContext* context) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    authorizations_.push_back(it == metadata.end()
                                  ? std::string(kNoAuthorization)
                                  : std::string(it->second.data(), it->second.size()));
  }

  absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_sweep_id_ ABSL_GUARDED_BY(mu_) = 1;
  int unavailable_submits_ ABSL_GUARDED_BY(mu_) = 0;
  int unavailable_get_searches_ ABSL_GUARDED_BY(mu_) = 0;
  int get_job_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool ignore_list_filters_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_request_id_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::deque<v1::JobState>> state_scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::MetricPoint> points_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::Sweep> sweeps_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> sweep_by_request_id_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::deque<v1::Sweep>> sweep_scripts_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::SweepReport> reports_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::Search> searches_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> search_by_request_id_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::deque<v1::Search>> search_scripts_ ABSL_GUARDED_BY(mu_);
  int64_t next_search_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<v1::SubmitSearchRequest> search_submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitJobRequest> submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitSweepRequest> sweep_submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListJobsRequest> list_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetMetricsRequest> metrics_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  std::string log_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::cli::fakes

#endif  // TESSERA_TESTS_CLI_FAKE_JOB_SERVICE_H_
