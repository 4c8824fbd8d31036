// CoordinatorClient over gRPC: calls tessera.v1.TrainerService on the
// coordinator for one (job, attempt, rank).
//
// Every call has a deadline. Rendezvous blocks on the server until all ranks have
// joined, so it gets a long deadline and is retried while the coordinator is
// UNAVAILABLE (e.g. still starting) for a bounded window. ReportResult retries the
// same way; ReportMetrics makes one attempt (the reporter retries), and so
// does RenewLease (the lease keeper retries, see lease.h).
//
// This file and its .cc are the only trainer code that includes gRPC; they are
// left out of TESSERA_TRAINER_ONLY builds. Thread-safe: state is constant after
// construction and gRPC stubs are thread-safe.
#ifndef TESSERA_WORKER_TRAINER_RUN_GRPC_COORDINATOR_CLIENT_H_
#define TESSERA_WORKER_TRAINER_RUN_GRPC_COORDINATOR_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "worker/trainer/run/coordinator_client.h"

namespace tessera::trainer {

struct GrpcCoordinatorClientOptions {
  // Rendezvous waits for the slowest rank to start, load data and join.
  absl::Duration rendezvous_deadline = absl::Minutes(10);
  // Deadline of ReportMetrics and of each ReportResult attempt.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // How long UNAVAILABLE answers to Rendezvous and ReportResult are retried.
  absl::Duration retry_window = absl::Seconds(60);
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
};

// Which rank of which attempt this client speaks for.
struct TrainerIdentity {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string credential;  // sent as "authorization: Bearer ..." on every call
};

class GrpcCoordinatorClient final : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(std::shared_ptr<grpc::Channel> channel, TrainerIdentity identity,
                        GrpcCoordinatorClientOptions options = {});

  absl::StatusOr<RendezvousResult> Rendezvous(const std::string& bootstrap,
                                              const std::string& backend) override;
  absl::Status ReportMetrics(const std::vector<MetricSample>& points) override;
  absl::Status ReportResult(const TrainingResult& result) override;

  // One renewal of this rank's lease, carrying `progress` as
  // RenewLeaseRequest.progress. Waits for the channel to connect, up to
  // `deadline`. After a failure it resets the channel's reconnect backoff, so
  // that the next renewal reaches a restarted coordinator at once rather than
  // after a backoff of minutes.
  absl::StatusOr<LeaseGrant> RenewLease(absl::Duration deadline,
                                        const ProgressReport& progress) override;

 private:
  void Authorize(grpc::ClientContext* context) const;

  const TrainerIdentity identity_;
  const GrpcCoordinatorClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<tessera::v1::TrainerService::Stub> stub_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_GRPC_COORDINATOR_CLIENT_H_
