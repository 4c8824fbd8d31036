#include "coordinator/api/job_service.h"

#include "common/grpc_status.h"

namespace tessera {

absl::StatusOr<Caller> JobServiceImpl::CallerOf(const grpc::ServerContext& context) {
  return auth_->AuthenticateUser(AuthorizationOf(context));
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  // The job runs as its owner on workers that run as root; without
  // authentication there is no one to name.
  JobOrigin origin;
  if (auth_->enabled()) origin.owner = caller->name;
  origin.admin = caller->admin;
  absl::StatusOr<int64_t> id = jobs_->Submit(request->spec(), request->spec_yaml(),
                                             request->client_request_id(), origin);
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  JobFilter filter;
  filter.state = request->state();
  filter.limit = request->limit();
  filter.sweep_id = request->sweep_id();
  filter.before_id = request->before_id();
  filter.owner = request->owner();
  absl::StatusOr<JobList> jobs = jobs_->ListJobs(*caller, filter);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (auto& job : jobs->jobs) *response->add_jobs() = std::move(job);
  response->set_next_before_id(jobs->next_before_id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context,
                                    const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Job> job = jobs_->GetJob(*caller, request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetMetrics(grpc::ServerContext* context,
                                        const v1::GetMetricsRequest* request,
                                        v1::GetMetricsResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<std::vector<v1::MetricPoint>> points =
      jobs_->GetMetrics(*caller, *request);
  if (!points.ok()) return ToGrpcStatus(points.status());
  for (auto& p : *points) *response->add_points() = std::move(p);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* context,
                                         const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  for (auto& w : workers_->ListWorkers(*caller)) *response->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::JobState> state = jobs_->CancelJob(*caller, request->job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetLogs(grpc::ServerContext* context,
                                     const v1::GetLogsRequest* request,
                                     v1::GetLogsResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::GetLogsResponse> logs = jobs_->GetLogs(*caller, *request);
  if (!logs.ok()) return ToGrpcStatus(logs.status());
  *response = std::move(*logs);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SubmitSweep(grpc::ServerContext* context,
                                         const v1::SubmitSweepRequest* request,
                                         v1::SubmitSweepResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::SubmitSweepResponse> submitted =
      sweeps_->Submit(request->spec(), request->spec_yaml(), request->client_request_id(),
                      auth_->enabled() ? caller->name : std::string());
  if (!submitted.ok()) return ToGrpcStatus(submitted.status());
  *response = std::move(*submitted);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListSweeps(grpc::ServerContext* context,
                                        const v1::ListSweepsRequest*,
                                        v1::ListSweepsResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<std::vector<v1::Sweep>> sweeps = sweeps_->List(*caller);
  if (!sweeps.ok()) return ToGrpcStatus(sweeps.status());
  for (auto& s : *sweeps) *response->add_sweeps() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetSweep(grpc::ServerContext* context,
                                      const v1::GetSweepRequest* request,
                                      v1::GetSweepResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Sweep> sweep = sweeps_->Get(*caller, request->sweep_id());
  if (!sweep.ok()) return ToGrpcStatus(sweep.status());
  *response->mutable_sweep() = std::move(*sweep);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetSweepReport(grpc::ServerContext* context,
                                            const v1::GetSweepReportRequest* request,
                                            v1::GetSweepReportResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::SweepReport> report = sweeps_->Report(*caller, request->sweep_id());
  if (!report.ok()) return ToGrpcStatus(report.status());
  *response->mutable_report() = std::move(*report);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelSweep(grpc::ServerContext* context,
                                         const v1::CancelSweepRequest* request,
                                         v1::CancelSweepResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::SweepState> state = sweeps_->Cancel(*caller, request->sweep_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

absl::StatusOr<Caller> JobServiceImpl::SearchCallerOf(
    const grpc::ServerContext& context) {
  if (searches_ == nullptr) {
    return absl::UnimplementedError("this coordinator runs no searches");
  }
  return CallerOf(context);
}

grpc::Status JobServiceImpl::SubmitSearch(grpc::ServerContext* context,
                                          const v1::SubmitSearchRequest* request,
                                          v1::SubmitSearchResponse* response) {
  absl::StatusOr<Caller> caller = SearchCallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::SubmitSearchResponse> submitted = searches_->Submit(
      request->spec(), request->spec_yaml(), request->client_request_id(),
      auth_->enabled() ? caller->name : std::string());
  if (!submitted.ok()) return ToGrpcStatus(submitted.status());
  *response = std::move(*submitted);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListSearches(grpc::ServerContext* context,
                                          const v1::ListSearchesRequest*,
                                          v1::ListSearchesResponse* response) {
  absl::StatusOr<Caller> caller = SearchCallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<std::vector<v1::Search>> searches = searches_->List(*caller);
  if (!searches.ok()) return ToGrpcStatus(searches.status());
  for (auto& s : *searches) *response->add_searches() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetSearch(grpc::ServerContext* context,
                                       const v1::GetSearchRequest* request,
                                       v1::GetSearchResponse* response) {
  absl::StatusOr<Caller> caller = SearchCallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::Search> search = searches_->Get(*caller, request->search_id());
  if (!search.ok()) return ToGrpcStatus(search.status());
  *response->mutable_search() = std::move(*search);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelSearch(grpc::ServerContext* context,
                                          const v1::CancelSearchRequest* request,
                                          v1::CancelSearchResponse* response) {
  absl::StatusOr<Caller> caller = SearchCallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<v1::SearchState> state =
      searches_->Cancel(*caller, request->search_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetShare(grpc::ServerContext* context,
                                      const v1::GetShareRequest*,
                                      v1::GetShareResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  for (const UserShare& u : quotas_->GetShare(*caller)) {
    v1::UserShare* out = response->add_users();
    out->set_user(u.user);
    out->set_usage_slot_seconds(u.usage_slot_seconds);
    out->set_factor(u.factor);
    out->set_running_ranks(u.running_ranks);
    out->set_queued_jobs(u.queued_jobs);
    out->set_running_memory_limit_bytes(u.running_memory_limit_bytes);
    out->set_max_memory_per_rank_bytes(u.max_memory_per_rank_bytes);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::DrainWorker(grpc::ServerContext* context,
                                         const v1::DrainWorkerRequest* request,
                                         v1::DrainWorkerResponse* response) {
  absl::StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->timeout_ms() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("timeout_ms: must not be negative"));
  }
  absl::StatusOr<v1::Worker> worker = workers_->DrainWorker(
      *caller, request->name(), absl::Milliseconds(request->timeout_ms()),
      request->undrain());
  if (!worker.ok()) return ToGrpcStatus(worker.status());
  *response->mutable_worker() = std::move(*worker);
  return grpc::Status::OK;
}

}  // namespace tessera
