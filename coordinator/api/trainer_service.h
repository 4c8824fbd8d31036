// TrainerServiceImpl: the gRPC adapter for trainer ranks over RankSessions.
//
// Uses the callback API: Rendezvous waits until every rank has joined and
// ReportMetrics until its points are durable, and neither should pin a server
// thread while waiting. ReportResult and RenewLease answer at once.
//
// Thread-safety: safe for concurrent calls.
#ifndef TESSERA_COORDINATOR_API_TRAINER_SERVICE_H_
#define TESSERA_COORDINATOR_API_TRAINER_SERVICE_H_

#include "coordinator/core/auth.h"
#include "coordinator/core/rank_sessions.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera {

class TrainerServiceImpl final : public tessera::v1::TrainerService::CallbackService {
 public:
  // Neither is owned. Every call needs the trainer credential of the (job,
  // attempt, rank) it names.
  TrainerServiceImpl(RankSessions* ranks, Authenticator* auth)
      : ranks_(ranks), auth_(auth) {}

  grpc::ServerUnaryReactor* Rendezvous(
      grpc::CallbackServerContext* context, const tessera::v1::RendezvousRequest* request,
      tessera::v1::RendezvousResponse* response) override;
  grpc::ServerUnaryReactor* ReportMetrics(
      grpc::CallbackServerContext* context,
      const tessera::v1::ReportMetricsRequest* request,
      tessera::v1::ReportMetricsResponse* response) override;
  grpc::ServerUnaryReactor* ReportResult(
      grpc::CallbackServerContext* context,
      const tessera::v1::ReportResultRequest* request,
      tessera::v1::ReportResultResponse* response) override;
  grpc::ServerUnaryReactor* RenewLease(
      grpc::CallbackServerContext* context, const tessera::v1::RenewLeaseRequest* request,
      tessera::v1::RenewLeaseResponse* response) override;

 private:
  // Whether the caller holds the trainer credential of the (job, attempt,
  // rank) that `request` names; when not, finishes `reactor` with the refusal.
  template <typename Request>
  bool Admit(const grpc::CallbackServerContext& context, const Request& request,
             grpc::ServerUnaryReactor* reactor);

  RankSessions* const ranks_;  // Not owned.
  Authenticator* const auth_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_TRAINER_SERVICE_H_
