#include "cli/client.h"

#include <utility>

#include "absl/time/clock.h"

namespace tessera::cli {

namespace v1 = tessera::v1;

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering (both follow
  // google.rpc.Code).
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                     Options options)
    : options_(std::move(options)), stub_(v1::JobService::NewStub(channel)) {}

void CoordinatorClient::SetDeadline(grpc::ClientContext& context) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
}

absl::StatusOr<int64_t> CoordinatorClient::SubmitJob(
    const v1::SubmitJobRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::SubmitJobResponse response;
  absl::Status status = FromGrpcStatus(stub_->SubmitJob(&context, request, &response));
  if (!status.ok()) return status;
  return response.job_id();
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListJobsResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListJobs(&context, v1::ListJobsRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(int64_t job_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetJob(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_job());
}

absl::StatusOr<v1::JobState> CoordinatorClient::CancelJob(int64_t job_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::CancelJobResponse response;
  absl::Status status = FromGrpcStatus(stub_->CancelJob(&context, request, &response));
  if (!status.ok()) return status;
  return response.state();
}

absl::StatusOr<v1::GetLogsResponse> CoordinatorClient::GetLogs(
    const v1::GetLogsRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetLogsResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetLogs(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::MetricPoint>> CoordinatorClient::GetMetrics(
    const v1::GetMetricsRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetMetricsResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetMetrics(&context, request, &response));
  if (!status.ok()) return status;
  return std::vector<v1::MetricPoint>(response.points().begin(), response.points().end());
}

absl::StatusOr<std::vector<v1::Worker>> CoordinatorClient::ListWorkers() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListWorkersResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListWorkers(&context, v1::ListWorkersRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::Worker>(response.workers().begin(), response.workers().end());
}

std::unique_ptr<CoordinatorClient> MakeCoordinatorClient(const std::string& address,
                                                         absl::Duration rpc_timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  return std::make_unique<CoordinatorClient>(
      std::move(channel),
      CoordinatorClient::Options{.rpc_timeout = rpc_timeout, .target = address});
}

}  // namespace tessera::cli
