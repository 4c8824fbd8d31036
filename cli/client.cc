#include "cli/client.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_tls.h"
#include "common/tls.h"

namespace tessera::cli {

namespace v1 = tessera::v1;

namespace {

// Tokens are short secrets; anything longer is a mistake (a file's contents).
constexpr size_t kMaxTokenBytes = 4096;
// Longest wait for the coordinator's certificate when checking a pin.
constexpr absl::Duration kTlsFetchTimeout = absl::Seconds(10);
// The coordinator answers at most this many points per GetMetrics by default;
// asking for exactly that keeps paging aligned with it.
constexpr int32_t kMetricsPageSize = 10000;
// Bound on what `tessctl metrics` holds in memory.
constexpr size_t kMaxMetricPoints = 5'000'000;

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering (both follow
  // google.rpc.Code).
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status ValidateToken(absl::string_view token) {
  if (token.empty()) return absl::InvalidArgumentError("the token is empty");
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token is longer than ", kMaxTokenBytes, " bytes"));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    // gRPC sends metadata values as HTTP/2 header text: visible ASCII only.
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token has a space, control or non-ASCII character at byte ",
                       i + 1, " (a trailing newline from a file?)"));
    }
  }
  return absl::OkStatus();
}

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                     Options options)
    : options_(std::move(options)), stub_(v1::JobService::NewStub(channel)) {}

CoordinatorClient::CoordinatorClient(absl::Status unusable, Options options)
    : options_(std::move(options)), unusable_(std::move(unusable)) {}

absl::Status CoordinatorClient::Prepare(grpc::ClientContext& context) const {
  if (!unusable_.ok()) return unusable_;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  if (!options_.token.empty()) {
    context.AddMetadata(kAuthorizationMetadata, absl::StrCat("Bearer ", options_.token));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CoordinatorClient::SubmitJob(
    const v1::SubmitJobRequest& request) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::SubmitJobResponse response;
  absl::Status status = FromGrpcStatus(stub_->SubmitJob(&context, request, &response));
  if (!status.ok()) return status;
  return response.job_id();
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::ListJobs(
    const v1::ListJobsRequest& request) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::ListJobsResponse response;
  absl::Status status = FromGrpcStatus(stub_->ListJobs(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::UserShare>> CoordinatorClient::GetShare() {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetShareResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->GetShare(&context, v1::GetShareRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::UserShare>(response.users().begin(), response.users().end());
}

absl::StatusOr<v1::Worker> CoordinatorClient::DrainWorker(const std::string& name,
                                                          int64_t timeout_ms,
                                                          bool undrain) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::DrainWorkerRequest request;
  request.set_name(name);
  request.set_timeout_ms(timeout_ms);
  request.set_undrain(undrain);
  v1::DrainWorkerResponse response;
  absl::Status status = FromGrpcStatus(stub_->DrainWorker(&context, request, &response));
  if (!status.ok()) return status;
  return response.worker();
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(int64_t job_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetJob(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_job());
}

absl::StatusOr<v1::JobState> CoordinatorClient::CancelJob(int64_t job_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
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
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetLogsResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetLogs(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::MetricPoint>> CoordinatorClient::GetMetrics(
    const v1::GetMetricsRequest& request) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetMetricsResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetMetrics(&context, request, &response));
  if (!status.ok()) return status;
  return std::vector<v1::MetricPoint>(response.points().begin(), response.points().end());
}

absl::StatusOr<std::vector<v1::MetricPoint>> FetchMetrics(CoordinatorClient& client,
                                                          int64_t job_id,
                                                          int64_t after_step,
                                                          const std::string& name) {
  // The coordinator returns points ordered by step. A full page may end part-way
  // through its last step, so the next page starts again at that step.
  std::vector<v1::MetricPoint> all;
  int64_t after = after_step;
  while (true) {
    v1::GetMetricsRequest request;
    request.set_job_id(job_id);
    request.set_after_step(after);
    request.set_name(name);
    request.set_limit(kMetricsPageSize);
    absl::StatusOr<std::vector<v1::MetricPoint>> page = client.GetMetrics(request);
    if (!page.ok()) return page.status();

    int64_t min_step = INT64_MAX;
    int64_t max_step = INT64_MIN;
    for (const v1::MetricPoint& p : *page) {
      min_step = std::min(min_step, p.step());
      max_step = std::max(max_step, p.step());
    }
    const bool full = page->size() >= static_cast<size_t>(kMetricsPageSize);
    // A full page of a single step cannot be split further; take it whole.
    const bool split = full && min_step < max_step;
    for (v1::MetricPoint& p : *page) {
      // "after_step" 0 means "all" to the server; filter here so that paging
      // from step 0 cannot repeat points.
      if (p.step() <= after) continue;
      if (split && p.step() == max_step) continue;
      all.push_back(std::move(p));
    }
    if (all.size() > kMaxMetricPoints) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", job_id, " has more than ", kMaxMetricPoints,
                       " metric points; select one with --name"));
    }
    if (!full) break;
    // Strictly increasing: a split page holds a step in (after, max_step).
    after = split ? max_step - 1 : max_step;
  }
  return all;
}

absl::StatusOr<std::vector<v1::Worker>> CoordinatorClient::ListWorkers() {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::ListWorkersResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListWorkers(&context, v1::ListWorkersRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::Worker>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<v1::SubmitSweepResponse> CoordinatorClient::SubmitSweep(
    const v1::SubmitSweepRequest& request) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::SubmitSweepResponse response;
  absl::Status status = FromGrpcStatus(stub_->SubmitSweep(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::Sweep>> CoordinatorClient::ListSweeps() {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::ListSweepsResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListSweeps(&context, v1::ListSweepsRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::Sweep>(response.sweeps().begin(), response.sweeps().end());
}

absl::StatusOr<v1::Sweep> CoordinatorClient::GetSweep(int64_t sweep_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetSweepRequest request;
  request.set_sweep_id(sweep_id);
  v1::GetSweepResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetSweep(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_sweep());
}

absl::StatusOr<v1::SweepReport> CoordinatorClient::GetSweepReport(int64_t sweep_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetSweepReportRequest request;
  request.set_sweep_id(sweep_id);
  v1::GetSweepReportResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->GetSweepReport(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_report());
}

absl::StatusOr<v1::SweepState> CoordinatorClient::CancelSweep(int64_t sweep_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::CancelSweepRequest request;
  request.set_sweep_id(sweep_id);
  v1::CancelSweepResponse response;
  absl::Status status = FromGrpcStatus(stub_->CancelSweep(&context, request, &response));
  if (!status.ok()) return status;
  return response.state();
}

absl::StatusOr<v1::SubmitSearchResponse> CoordinatorClient::SubmitSearch(
    const v1::SubmitSearchRequest& request) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::SubmitSearchResponse response;
  absl::Status status = FromGrpcStatus(stub_->SubmitSearch(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<std::vector<v1::Search>> CoordinatorClient::ListSearches() {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::ListSearchesResponse response;
  absl::Status status =
      FromGrpcStatus(stub_->ListSearches(&context, v1::ListSearchesRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::Search>(response.searches().begin(), response.searches().end());
}

absl::StatusOr<v1::Search> CoordinatorClient::GetSearch(int64_t search_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::GetSearchRequest request;
  request.set_search_id(search_id);
  v1::GetSearchResponse response;
  absl::Status status = FromGrpcStatus(stub_->GetSearch(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_search());
}

absl::StatusOr<v1::SearchState> CoordinatorClient::CancelSearch(int64_t search_id) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(context); !ready.ok()) return ready;
  v1::CancelSearchRequest request;
  request.set_search_id(search_id);
  v1::CancelSearchResponse response;
  absl::Status status = FromGrpcStatus(stub_->CancelSearch(&context, request, &response));
  if (!status.ok()) return status;
  return response.state();
}

std::unique_ptr<CoordinatorClient> MakeCoordinatorClient(
    const ConnectionOptions& connection, absl::Duration rpc_timeout) {
  // A pinned token's pin is public and only for this side.
  TokenParts token = SplitTokenPin(connection.token);
  CoordinatorClient::Options options{
      .rpc_timeout = rpc_timeout, .target = connection.address, .token = token.token};
  auto from_env = [](const std::string& value, const char* name) {
    if (!value.empty()) return value;
    const char* env = std::getenv(name);
    return std::string(env != nullptr ? env : "");
  };
  const std::string ca_file = from_env(connection.tls_ca_file, kTlsCaEnv);
  std::string pin = from_env(connection.tls_pin, kTlsPinEnv);
  if (pin.empty() && ca_file.empty()) pin = token.pin;
  absl::StatusOr<ClientTls> tls = ResolveClientTls(
      connection.address, ca_file, pin, std::min(rpc_timeout, kTlsFetchTimeout));
  if (!tls.ok()) {
    // Not retryable: a later call would meet the same certificate.
    return std::make_unique<CoordinatorClient>(
        absl::FailedPreconditionError(absl::StrCat("TLS: ", tls.status().message())),
        std::move(options));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      ChannelCredentialsFor(*tls, args);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(connection.address, credentials, args);
  return std::make_unique<CoordinatorClient>(std::move(channel), std::move(options));
}

}  // namespace tessera::cli
