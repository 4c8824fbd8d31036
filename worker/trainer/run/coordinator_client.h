// The trainer's view of the coordinator's TrainerService: rendezvous, metric
// batches, the lease renewals that carry the progress reports, and the final
// result of one rank of one job attempt.
//
// An interface without gRPC so the training code, the reporter and their tests do
// not depend on it; grpc_coordinator_client.h is the real implementation (absent
// from TESSERA_TRAINER_ONLY builds). Implementations are thread-safe: the
// reporter's sender thread and the main thread call them concurrently.
#ifndef TESSERA_WORKER_TRAINER_RUN_COORDINATOR_CLIENT_H_
#define TESSERA_WORKER_TRAINER_RUN_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/rendezvous_client.h"
#include "worker/trainer/run/eval_report.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {

struct MetricSample {
  int64_t step = 0;
  std::string name;
  double value = 0;
  int64_t unix_ms = 0;
};

struct TrainingResult {
  std::string param_hash;  // see param_hash.h
  double test_accuracy = 0;
  double test_loss = 0;
  std::optional<EvalReport> eval;  // an evaluation-only run's report (rank 0)
};

// The coordinator's answer to a lease renewal (tessera.v1.RenewLeaseResponse).
struct LeaseGrant {
  absl::Duration lease;  // counted from the renewal's send time
  // Renew (and so report progress) at least this often; zero: every lease/4.
  absl::Duration report_every;
};

class CoordinatorClient : public RendezvousClient {
 public:
  // Rendezvous (rendezvous_client.h) joins the attempt.

  // Delivers one batch of metric points. Unavailable when the coordinator cannot
  // be reached; callers keep the points and retry.
  virtual absl::Status ReportMetrics(const std::vector<MetricSample>& points) = 0;

  // Reports this rank's final result.
  virtual absl::Status ReportResult(const TrainingResult& result) = 0;

  // Renews this rank's lease and delivers its progress report, within
  // `deadline` (one attempt; the lease keeper retries, see lease.h).
  // Unimplemented from a coordinator without leases; Aborted or NotFound when
  // the coordinator no longer counts this rank.
  virtual absl::StatusOr<LeaseGrant> RenewLease(absl::Duration deadline,
                                                const ProgressReport& progress) = 0;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_COORDINATOR_CLIENT_H_
