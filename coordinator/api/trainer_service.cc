#include "coordinator/api/trainer_service.h"

#include "common/grpc_status.h"

namespace tessera {

template <typename Request>
bool TrainerServiceImpl::Admit(const grpc::CallbackServerContext& context,
                               const Request& request,
                               grpc::ServerUnaryReactor* reactor) {
  absl::Status allowed = auth_->CheckTrainer(AuthorizationOf(context), request.job_id(),
                                             request.attempt(), request.rank());
  if (allowed.ok()) return true;
  reactor->Finish(ToGrpcStatus(allowed));
  return false;
}

grpc::ServerUnaryReactor* TrainerServiceImpl::Rendezvous(
    grpc::CallbackServerContext* context, const v1::RendezvousRequest* request,
    v1::RendezvousResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Admit(*context, *request, reactor)) return reactor;
  // The reactor stays valid until Finish, so the callback may outlive this frame.
  ranks_->Rendezvous(*request,
                     [reactor, response](absl::StatusOr<v1::RendezvousResponse> result) {
                       if (!result.ok()) {
                         reactor->Finish(ToGrpcStatus(result.status()));
                         return;
                       }
                       *response = std::move(*result);
                       reactor->Finish(grpc::Status::OK);
                     });
  return reactor;
}

grpc::ServerUnaryReactor* TrainerServiceImpl::ReportMetrics(
    grpc::CallbackServerContext* context, const v1::ReportMetricsRequest* request,
    v1::ReportMetricsResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Admit(*context, *request, reactor)) return reactor;
  ranks_->ReportMetrics(*request, [reactor](absl::Status status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* TrainerServiceImpl::ReportResult(
    grpc::CallbackServerContext* context, const v1::ReportResultRequest* request,
    v1::ReportResultResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Admit(*context, *request, reactor)) return reactor;
  reactor->Finish(ToGrpcStatus(ranks_->ReportResult(*request)));
  return reactor;
}

grpc::ServerUnaryReactor* TrainerServiceImpl::RenewLease(
    grpc::CallbackServerContext* context, const v1::RenewLeaseRequest* request,
    v1::RenewLeaseResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Admit(*context, *request, reactor)) return reactor;
  absl::StatusOr<absl::Duration> lease = ranks_->RenewLease(*request);
  if (lease.ok()) {
    response->set_lease_ms(absl::ToInt64Milliseconds(*lease));
    response->set_report_every_ms(
        absl::ToInt64Milliseconds(ranks_->progress_report_interval()));
  }
  reactor->Finish(ToGrpcStatus(lease.status()));
  return reactor;
}

}  // namespace tessera
