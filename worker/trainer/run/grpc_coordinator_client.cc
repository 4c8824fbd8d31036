#include "worker/trainer/run/grpc_coordinator_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/retry.h"

namespace tessera::trainer {
namespace {

absl::Status ToAbsl(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// Runs `call(context)` with a fresh context per attempt, retrying UNAVAILABLE
// with jittered exponential backoff while the next attempt would start within
// `options.retry_window`. Errors name `what`.
template <typename Call>
absl::Status CallWithRetry(const GrpcCoordinatorClientOptions& options,
                           absl::Duration deadline, const std::string& what, Call call) {
  RealClock clock;
  return Retry({.initial_delay = options.initial_backoff,
                .max_delay = options.max_backoff,
                .deadline = options.retry_window},
               clock, [&] {
                 grpc::ClientContext context;
                 context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
                 return ToAbsl(call(&context), what);
               });
}

}  // namespace

GrpcCoordinatorClient::GrpcCoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                             TrainerIdentity identity,
                                             GrpcCoordinatorClientOptions options)
    : identity_(identity),
      options_(options),
      channel_(std::move(channel)),
      stub_(tessera::v1::TrainerService::NewStub(channel_)) {}

void GrpcCoordinatorClient::Authorize(grpc::ClientContext* context) const {
  if (!identity_.credential.empty()) {
    context->AddMetadata("authorization", "Bearer " + identity_.credential);
  }
}

absl::StatusOr<RendezvousResult> GrpcCoordinatorClient::Rendezvous(
    const std::string& bootstrap, const std::string& backend) {
  tessera::v1::RendezvousRequest request;
  request.set_job_id(identity_.job_id);
  request.set_attempt(identity_.attempt);
  request.set_rank(identity_.rank);
  request.set_bootstrap(bootstrap);
  request.set_backend(backend);
  tessera::v1::RendezvousResponse response;
  const absl::Status status =
      CallWithRetry(options_, options_.rendezvous_deadline, "Rendezvous",
                    [&](grpc::ClientContext* context) {
                      Authorize(context);
                      return stub_->Rendezvous(context, request, &response);
                    });
  if (!status.ok()) return status;
  RendezvousResult result;
  result.rank = response.rank();
  result.local_rank = response.local_rank();
  result.world_size = response.world_size();
  result.attempt = response.attempt();
  result.bootstrap = response.bootstrap();
  result.backend = response.backend();
  return result;
}

absl::Status GrpcCoordinatorClient::ReportMetrics(
    const std::vector<MetricSample>& points) {
  tessera::v1::ReportMetricsRequest request;
  request.set_job_id(identity_.job_id);
  request.set_attempt(identity_.attempt);
  request.set_rank(identity_.rank);
  for (const MetricSample& sample : points) {
    tessera::v1::MetricPoint* point = request.add_points();
    point->set_rank(identity_.rank);
    point->set_attempt(identity_.attempt);
    point->set_step(sample.step);
    point->set_name(sample.name);
    point->set_value(sample.value);
    point->set_unix_ms(sample.unix_ms);
  }
  tessera::v1::ReportMetricsResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  Authorize(&context);
  return ToAbsl(stub_->ReportMetrics(&context, request, &response), "ReportMetrics");
}

namespace {

void FillEvalResult(const EvalReport& report, tessera::v1::EvalResult& out) {
  out.set_split(report.split);
  out.set_step(report.step);
  out.set_samples(report.samples);
  out.set_top1(report.top1);
  out.set_top5(report.top5);
  out.set_loss(report.loss);
  out.mutable_class_names()->Assign(report.class_names.begin(), report.class_names.end());
  out.mutable_class_accuracy()->Assign(report.class_accuracy.begin(),
                                       report.class_accuracy.end());
  out.mutable_class_samples()->Assign(report.class_samples.begin(),
                                      report.class_samples.end());
  out.mutable_confusion()->Assign(report.confusion.begin(), report.confusion.end());
}

}  // namespace

absl::Status GrpcCoordinatorClient::ReportResult(const TrainingResult& result) {
  tessera::v1::ReportResultRequest request;
  request.set_job_id(identity_.job_id);
  request.set_attempt(identity_.attempt);
  request.set_rank(identity_.rank);
  request.set_param_hash(result.param_hash);
  request.set_test_accuracy(result.test_accuracy);
  request.set_test_loss(result.test_loss);
  if (result.eval.has_value()) FillEvalResult(*result.eval, *request.mutable_eval());
  tessera::v1::ReportResultResponse response;
  return CallWithRetry(options_, options_.rpc_deadline, "ReportResult",
                       [&](grpc::ClientContext* context) {
                         Authorize(context);
                         return stub_->ReportResult(context, request, &response);
                       });
}

absl::StatusOr<LeaseGrant> GrpcCoordinatorClient::RenewLease(
    absl::Duration deadline, const ProgressReport& progress) {
  tessera::v1::RenewLeaseRequest request;
  request.set_job_id(identity_.job_id);
  request.set_attempt(identity_.attempt);
  request.set_rank(identity_.rank);
  tessera::v1::RankProgress* report = request.mutable_progress();
  report->set_step(progress.step);
  report->set_phase(progress.phase);
  report->set_collective(progress.collective);
  report->set_phase_elapsed_ms(progress.phase_elapsed_ms);
  report->set_step_time_ms(progress.step_time_ms);
  for (const auto& [phase, ms] : progress.phase_ms) {
    (*report->mutable_phase_ms())[phase] = ms;
  }
  report->set_window_steps(progress.window_steps);
  report->set_phase_items(progress.phase_items);
  report->set_collective_ready(progress.collective_ready);
  for (const auto& [phase, ms] : progress.device_phase_ms) {
    (*report->mutable_device_phase_ms())[phase] = ms;
  }
  report->set_device_window_steps(progress.device_window_steps);
  tessera::v1::RenewLeaseResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  context.set_wait_for_ready(true);
  Authorize(&context);
  const grpc::Status status = stub_->RenewLease(&context, request, &response);
  if (!status.ok()) {
    grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
    return ToAbsl(status, "RenewLease");
  }
  return LeaseGrant{.lease = absl::Milliseconds(response.lease_ms()),
                    .report_every = absl::Milliseconds(response.report_every_ms())};
}

}  // namespace tessera::trainer
