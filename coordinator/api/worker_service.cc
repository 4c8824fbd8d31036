#include "coordinator/api/worker_service.h"

#include "common/grpc_status.h"

namespace tessera {

grpc::Status WorkerServiceImpl::CheckWorker(const grpc::ServerContext& context) {
  return ToGrpcStatus(auth_->Authenticate(AuthorizationOf(context), kJoinToken).status());
}

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* context,
                                               const v1::RegisterWorkerRequest* request,
                                               v1::RegisterWorkerResponse* response) {
  if (grpc::Status denied = CheckWorker(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::RegisterWorkerResponse> result = workers_->RegisterWorker(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  if (grpc::Status denied = CheckWorker(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::HeartbeatResponse> result = workers_->Heartbeat(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  for (v1::LaunchOrder& order : *response->mutable_launch()) {
    order.set_credential(
        auth_->IssueTrainerCredential(order.job_id(), order.attempt(), order.rank()));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ShipLogs(grpc::ServerContext* context,
                                         const v1::ShipLogsRequest* request,
                                         v1::ShipLogsResponse* response) {
  if (grpc::Status denied = CheckWorker(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::ShipLogsResponse> result = workers_->ShipLogs(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace tessera
