#include "coordinator/job_service.h"

#include "coordinator/common/grpc_status.h"

namespace tessera {

namespace v1 = ::tessera::v1;

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  absl::StatusOr<int64_t> id = manager_->Submit(request->spec(), request->spec_yaml(),
                                                request->client_request_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                                      v1::ListJobsResponse* response) {
  absl::StatusOr<std::vector<v1::Job>> jobs = manager_->ListJobs();
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (auto& job : *jobs) *response->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*,
                                    const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  absl::StatusOr<v1::Job> job = manager_->GetJob(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response->mutable_job() = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetMetrics(grpc::ServerContext*,
                                        const v1::GetMetricsRequest* request,
                                        v1::GetMetricsResponse* response) {
  absl::StatusOr<std::vector<v1::MetricPoint>> points = manager_->GetMetrics(*request);
  if (!points.ok()) return ToGrpcStatus(points.status());
  for (auto& p : *points) *response->add_points() = std::move(p);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext*,
                                         const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* response) {
  for (auto& w : manager_->ListWorkers()) *response->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  absl::StatusOr<v1::JobState> state = manager_->CancelJob(request->job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetLogs(grpc::ServerContext*,
                                     const v1::GetLogsRequest* request,
                                     v1::GetLogsResponse* response) {
  absl::StatusOr<v1::GetLogsResponse> logs = manager_->GetLogs(*request);
  if (!logs.ok()) return ToGrpcStatus(logs.status());
  *response = std::move(*logs);
  return grpc::Status::OK;
}

}  // namespace tessera
