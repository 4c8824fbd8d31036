// RankSessions: what trainer ranks ask of the coordinator, over the
// ClusterState. A rank joins its attempt's rendezvous (the attempt is RUNNING
// once all have joined), renews its lease with a progress report (which feeds
// the attempt's watchdog), reports metrics and its final result. The trainer
// service (coordinator/api/trainer_service.h) is an adapter over this class
// alone. It also fails attempts whose rendezvous timed out (from Tick) and
// closes every waiting rendezvous at shutdown.
//
// Thread-safety: every public method is safe from any thread; it takes the
// state's mutex itself, except FailTimedOutRendezvousLocked, which requires
// it. Callbacks passed in are run without the lock held. It holds no state of
// its own.
#ifndef TESSERA_COORDINATOR_CORE_RANK_SESSIONS_H_
#define TESSERA_COORDINATOR_CORE_RANK_SESSIONS_H_

#include <cstddef>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/job_lifecycle.h"
#include "coordinator/core/rendezvous_rounds.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class RankSessions {
 public:
  // Neither is owned; each must outlive this.
  RankSessions(ClusterState* state, JobLifecycle* lifecycle)
      : state_(*state), lifecycle_(*lifecycle) {}

  RankSessions(const RankSessions&) = delete;
  RankSessions& operator=(const RankSessions&) = delete;

  // Answers through `done` once every rank of the attempt has joined, or at
  // once with an error for a bad request.
  void Rendezvous(
      const tessera::v1::RendezvousRequest& request,
      std::function<void(absl::StatusOr<tessera::v1::RendezvousResponse>)> done)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // Renews the lease of a current rank and returns its duration. Aborted for
  // a rank that is no longer current (the trainer then stops), NotFound for a
  // job that is not active. The request's progress report feeds the
  // attempt's watchdog.
  absl::StatusOr<absl::Duration> RenewLease(const tessera::v1::RenewLeaseRequest& request)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // How often trainers should renew (and report progress) at least.
  absl::Duration progress_report_interval() const {
    return state_.options.progress_report_interval;
  }
  // Calls `done` once the points are durable (or with the error).
  void ReportMetrics(const tessera::v1::ReportMetricsRequest& request,
                     std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  absl::Status ReportResult(const tessera::v1::ReportResultRequest& request)
      ABSL_LOCKS_EXCLUDED(state_.mu);

  // Tick: fails attempts whose ranks have not all joined within the
  // rendezvous timeout, naming the missing ranks. Returns whether any was.
  bool FailTimedOutRendezvousLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Fails every waiting rendezvous with Unavailable so that the RPC server can
  // shut down; trainers retry against the restarted coordinator.
  void CloseAll() ABSL_LOCKS_EXCLUDED(state_.mu);

 private:
  // Counts a metric report's rows as refused and passes `status` on.
  void RefuseMetrics(size_t rows, const absl::Status& status,
                     const std::function<void(absl::Status)>& done);

  ClusterState& state_;      // Not owned.
  JobLifecycle& lifecycle_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_RANK_SESSIONS_H_
