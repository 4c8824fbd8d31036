// WorkerServiceImpl: the gRPC adapter for worker sessions (register, heartbeat,
// log shipping) over WorkerIdentity, which checks each worker's own credential
// before WorkerSessions sees the call. Plain synchronous handlers.
//
// Thread-safety: safe for concurrent calls.
#ifndef TESSERA_COORDINATOR_API_WORKER_SERVICE_H_
#define TESSERA_COORDINATOR_API_WORKER_SERVICE_H_

#include "coordinator/core/auth.h"
#include "coordinator/core/worker_identity.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera {

class WorkerServiceImpl final : public tessera::v1::WorkerService::Service {
 public:
  // Neither is owned. Every call needs a join token (and, past the first
  // registration, the worker's own credential); launch orders carry each
  // rank's trainer credential.
  WorkerServiceImpl(WorkerIdentity* workers, Authenticator* auth)
      : workers_(workers), auth_(auth) {}

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const tessera::v1::RegisterWorkerRequest* request,
                              tessera::v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const tessera::v1::HeartbeatRequest* request,
                         tessera::v1::HeartbeatResponse* response) override;
  grpc::Status ShipLogs(grpc::ServerContext* context,
                        const tessera::v1::ShipLogsRequest* request,
                        tessera::v1::ShipLogsResponse* response) override;

 private:
  grpc::Status CheckWorker(const grpc::ServerContext& context);

  WorkerIdentity* const workers_;  // Not owned.
  Authenticator* const auth_;      // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_WORKER_SERVICE_H_
