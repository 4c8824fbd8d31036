// JobServiceImpl: the gRPC adapter for tessctl's JobService over the core
// parts it uses: JobRequests (jobs), WorkerSessions (listing and draining
// workers), UserQuotas (fair share), SweepManager and SearchManager. Plain
// synchronous handlers; no logic beyond converting types and statuses.
//
// Thread-safety: safe for concurrent calls (the parts are thread-safe).
#ifndef TESSERA_COORDINATOR_API_JOB_SERVICE_H_
#define TESSERA_COORDINATOR_API_JOB_SERVICE_H_

#include "coordinator/core/auth.h"
#include "coordinator/core/job_requests.h"
#include "coordinator/core/search_manager.h"
#include "coordinator/core/sweep_manager.h"
#include "coordinator/core/user_quotas.h"
#include "coordinator/core/worker_sessions.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera {

class JobServiceImpl final : public tessera::v1::JobService::Service {
 public:
  // None is owned. Every call needs a user token (see auth.h). Without
  // `searches` the search calls answer UNIMPLEMENTED.
  JobServiceImpl(JobRequests* jobs, WorkerSessions* workers, UserQuotas* quotas,
                 SweepManager* sweeps, Authenticator* auth,
                 SearchManager* searches = nullptr)
      : jobs_(jobs),
        workers_(workers),
        quotas_(quotas),
        sweeps_(sweeps),
        auth_(auth),
        searches_(searches) {}

  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const tessera::v1::SubmitJobRequest* request,
                         tessera::v1::SubmitJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const tessera::v1::ListJobsRequest* request,
                        tessera::v1::ListJobsResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const tessera::v1::GetJobRequest* request,
                      tessera::v1::GetJobResponse* response) override;
  grpc::Status GetMetrics(grpc::ServerContext* context,
                          const tessera::v1::GetMetricsRequest* request,
                          tessera::v1::GetMetricsResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const tessera::v1::ListWorkersRequest* request,
                           tessera::v1::ListWorkersResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const tessera::v1::CancelJobRequest* request,
                         tessera::v1::CancelJobResponse* response) override;
  grpc::Status GetLogs(grpc::ServerContext* context,
                       const tessera::v1::GetLogsRequest* request,
                       tessera::v1::GetLogsResponse* response) override;
  grpc::Status SubmitSweep(grpc::ServerContext* context,
                           const tessera::v1::SubmitSweepRequest* request,
                           tessera::v1::SubmitSweepResponse* response) override;
  grpc::Status ListSweeps(grpc::ServerContext* context,
                          const tessera::v1::ListSweepsRequest* request,
                          tessera::v1::ListSweepsResponse* response) override;
  grpc::Status GetSweep(grpc::ServerContext* context,
                        const tessera::v1::GetSweepRequest* request,
                        tessera::v1::GetSweepResponse* response) override;
  grpc::Status GetSweepReport(grpc::ServerContext* context,
                              const tessera::v1::GetSweepReportRequest* request,
                              tessera::v1::GetSweepReportResponse* response) override;
  grpc::Status CancelSweep(grpc::ServerContext* context,
                           const tessera::v1::CancelSweepRequest* request,
                           tessera::v1::CancelSweepResponse* response) override;
  grpc::Status SubmitSearch(grpc::ServerContext* context,
                            const tessera::v1::SubmitSearchRequest* request,
                            tessera::v1::SubmitSearchResponse* response) override;
  grpc::Status ListSearches(grpc::ServerContext* context,
                            const tessera::v1::ListSearchesRequest* request,
                            tessera::v1::ListSearchesResponse* response) override;
  grpc::Status GetSearch(grpc::ServerContext* context,
                         const tessera::v1::GetSearchRequest* request,
                         tessera::v1::GetSearchResponse* response) override;
  grpc::Status CancelSearch(grpc::ServerContext* context,
                            const tessera::v1::CancelSearchRequest* request,
                            tessera::v1::CancelSearchResponse* response) override;
  grpc::Status GetShare(grpc::ServerContext* context, const v1::GetShareRequest* request,
                        v1::GetShareResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context,
                           const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;

 private:
  // The calling user, or the refusal to send back.
  absl::StatusOr<Caller> CallerOf(const grpc::ServerContext& context);
  // The caller of a search call, or the refusal (UNIMPLEMENTED without
  // searches).
  absl::StatusOr<Caller> SearchCallerOf(const grpc::ServerContext& context);

  JobRequests* const jobs_;        // Not owned.
  WorkerSessions* const workers_;  // Not owned.
  UserQuotas* const quotas_;       // Not owned.
  SweepManager* const sweeps_;     // Not owned.
  Authenticator* const auth_;      // Not owned.
  SearchManager* const searches_;  // Not owned; may be null.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_JOB_SERVICE_H_
