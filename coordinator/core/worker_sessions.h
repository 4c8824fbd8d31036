// WorkerSessions: the workers' side of the coordinator, over the
// ClusterState. A worker registers (a new session: every rank placed there
// that it does not list is lost at once), heartbeats (each listed rank is
// reconciled with what the coordinator believes, WorkerRegistry's verdicts,
// and the reply carries launch, stop and preempt orders), ships its ranks'
// logs, and is drained by an admin or by itself when stopping. From Tick it
// declares silent workers dead and ends drains whose time is up. The worker
// gate (worker_identity.h) and the job service's worker calls sit over this
// class alone.
//
// Thread-safety: every public method is safe from any thread; it takes the
// state's mutex itself, except the `Locked` Tick steps, which require it. No
// method holds the lock across disk I/O: Heartbeat waits for its exits to be
// stored after dropping it. It holds no state of its own.
#ifndef TESSERA_COORDINATOR_CORE_WORKER_SESSIONS_H_
#define TESSERA_COORDINATOR_CORE_WORKER_SESSIONS_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/core/active_job.h"
#include "coordinator/core/caller.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/job_lifecycle.h"
#include "coordinator/core/job_placer.h"
#include "coordinator/core/rendezvous_rounds.h"
#include "coordinator/core/user_quotas.h"
#include "coordinator/core/worker_registry.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class WorkerSessions {
 public:
  // None is owned; each must outlive this.
  WorkerSessions(ClusterState* state, JobLifecycle* lifecycle, JobPlacer* placer,
                 UserQuotas* quotas)
      : state_(*state), lifecycle_(*lifecycle), placer_(*placer), quotas_(*quotas) {}

  WorkerSessions(const WorkerSessions&) = delete;
  WorkerSessions& operator=(const WorkerSessions&) = delete;

  // Registers a worker (a new session). Every rank the coordinator believes
  // runs there and that the request does not list is lost at once.
  absl::StatusOr<tessera::v1::RegisterWorkerResponse> RegisterWorker(
      const tessera::v1::RegisterWorkerRequest& request) ABSL_LOCKS_EXCLUDED(state_.mu);
  absl::StatusOr<tessera::v1::HeartbeatResponse> Heartbeat(
      const tessera::v1::HeartbeatRequest& request) ABSL_LOCKS_EXCLUDED(state_.mu);
  // Stores a piece of a rank's log shipped by its worker. PermissionDenied
  // unless that rank of that attempt was assigned to the calling worker.
  absl::StatusOr<tessera::v1::ShipLogsResponse> ShipLogs(
      const tessera::v1::ShipLogsRequest& request) ABSL_LOCKS_EXCLUDED(state_.mu);
  // Whether a worker of this name is registered and not declared dead.
  bool WorkerLive(const std::string& name) ABSL_LOCKS_EXCLUDED(state_.mu);

  // Slots used by jobs the caller may not see are counted, not named.
  std::vector<tessera::v1::Worker> ListWorkers(const Caller& caller)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // Admin only (PermissionDenied otherwise; NotFound for an unknown worker).
  // Drain: the worker gets no new ranks; each running rank there is sent
  // SIGUSR1 (checkpoint and exit with the preempted code) and its job
  // requeues without counting a restart; ranks still running after `timeout`
  // (zero: drain_timeout) are stopped. Undrain: it takes ranks again.
  absl::StatusOr<tessera::v1::Worker> DrainWorker(const Caller& caller,
                                                  const std::string& name,
                                                  absl::Duration timeout, bool undrain)
      ABSL_LOCKS_EXCLUDED(state_.mu);

  // Tick steps; each returns whether a job changed.
  //
  // Declares workers silent past the dead threshold dead, fencing their
  // sessions, and counts their ranks as lost.
  bool DeclareSilentWorkersDeadLocked(RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Ends the attempts still on a draining worker past its deadline, or
  // placed there but not started.
  bool EnforceDrainsLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

 private:
  // Heartbeat steps, in order. The two Reconcile steps return whether a job
  // changed (then finished jobs are reaped and queued ones placed).
  //
  // Applies the verdict on each rank the worker lists; stop orders and
  // acknowledged exits go into `response`. Exits recorded are appended to
  // `recorded` when it is not null.
  bool ReconcileReportedRanksLocked(const HeartbeatReport& report,
                                    tessera::v1::HeartbeatResponse& response,
                                    RendezvousRounds::Releases* releases,
                                    std::vector<RankRecord>* recorded = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Records the exit of the current rank of `job` that `reported` names, and
  // decides the job's outcome. Appends the record to `recorded` when it is
  // not null.
  void RecordExitLocked(ActiveJob& job, const tessera::v1::LocalRank& reported,
                        RendezvousRounds::Releases* releases,
                        std::vector<RankRecord>* recorded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Applies the verdict on each rank of an earlier attempt the worker no
  // longer lists: it stopped, so its slot is free and no restart waits for it.
  bool ReconcileUnlistedRanksLocked(const HeartbeatReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Counts each current rank the report's worker no longer runs (kLost) as
  // exited, and decides its job's outcome. Returns whether any was.
  bool LoseUnlistedRanksLocked(const HeartbeatReport& report,
                               RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Orders for the worker: launches not yet seen running, stops not yet done,
  // and, on a draining worker, preemption of its running ranks.
  void AddOrdersLocked(const HeartbeatReport& report,
                       tessera::v1::HeartbeatResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Waits (bounded) for the exits a heartbeat recorded to be durable; when
  // they are not, takes the acknowledgements out of `response`.
  void AcknowledgeOnceStored(const std::string& worker,
                             const std::vector<RankRecord>& exits,
                             tessera::v1::HeartbeatResponse& response)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // Whether the rank a worker ships logs of was placed on it: in memory, or
  // for an ended job or forgotten attempt, in the store.
  absl::StatusOr<bool> PlacedHere(const tessera::v1::ShipLogsRequest& request)
      ABSL_LOCKS_EXCLUDED(state_.mu);

  ClusterState& state_;      // Not owned.
  JobLifecycle& lifecycle_;  // Not owned.
  JobPlacer& placer_;        // Not owned.
  UserQuotas& quotas_;       // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_WORKER_SESSIONS_H_
