// JobManager: the coordinator's core, built of parts that work on one
// ClusterState (cluster_state.h) under its one mutex, after Ray's GCS (one
// manager per concern over a shared store):
//
//   JobLifecycle    the job state machine: transitions, failed attempts,
//                   lost ranks, reaping, the watchdog over running attempts
//   JobPlacer       the queue and the scheduler's placements (and the Slurm
//                   pools' view of them)
//   UserQuotas      per-user limits and fair-share usage
//   RankSessions    trainer ranks: rendezvous, lease, metrics, result
//   WorkerSessions  workers: register, heartbeat (reconcile, orders), logs,
//                   drain
//   JobRequests     users' job calls: submit, get, list, metrics, logs, cancel
//   ClusterView     /metrics figures and the store's mode
//
// The JobManager owns the state and the parts, wires them, recovers the
// state from the store, and runs the periodic checks (Tick) that span them.
// Each gRPC service and the HTTP API depend on the part they use, reached
// through the accessors below; one mutex is kept because a heartbeat changes
// workers and jobs in one step.
//
// Use: construct, Recover() once before serving, hand the parts to the
// services, and call Tick() periodically (the coordinator's monitor thread).
//
// Durability: state changes are enqueued on the StoreWriter while the lock is
// held (so they reach disk in the order they happened) and written by its
// thread, so no method holds the lock across disk I/O.
//
// Thread-safety: every public method is safe from any thread, and so is every
// public method of the parts. Callbacks passed in are run without the lock.
#ifndef TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_
#define TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "coordinator/core/change_notifier.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/cluster_view.h"
#include "coordinator/core/job_lifecycle.h"
#include "coordinator/core/job_manager_options.h"
#include "coordinator/core/job_placer.h"
#include "coordinator/core/job_requests.h"
#include "coordinator/core/rank_sessions.h"
#include "coordinator/core/slurm/slurm_pool_manager.h"
#include "coordinator/core/user_quotas.h"
#include "coordinator/core/worker_sessions.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"

namespace tessera {

class JobManager {
 public:
  // `store`, `writer` and `clock` are not owned and must outlive the manager.
  JobManager(Store* store, StoreWriter* writer, const Clock* clock,
             JobManagerOptions options);

  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads workers, non-terminal jobs and fair-share usage from the store.
  // Call once, before serving.
  absl::Status Recover();

  // Periodic checks, run by the coordinator's monitor thread (and by tests with
  // a fake clock): declares silent workers dead, fails attempts whose
  // rendezvous timed out, runs the watchdog over running attempts (ending
  // those with an unresponsive or stalled rank, flagging stragglers), ends
  // drains whose time is up, and saves the fair-share usage now and then.
  void Tick();

  // Slurm pools (slurm_pool_manager.h), not owned; null (the default): none.
  // Set once, before serving.
  void SetSlurmPools(SlurmPoolManager* pools) { state_.slurm.store(pools); }
  // One round of the Slurm pools when their interval has passed
  // (JobPlacer::TickSlurm); called by the monitor thread after Tick().
  void TickSlurm() { placer_.TickSlurm(); }

  // Fails every waiting rendezvous with Unavailable so that the RPC server can
  // shut down; trainers retry against the restarted coordinator.
  void Shutdown() { ranks_.CloseAll(); }

  // The parts the services use.
  JobRequests& jobs() { return jobs_; }
  WorkerSessions& workers() { return workers_; }
  RankSessions& ranks() { return ranks_; }
  UserQuotas& quotas() { return quotas_; }
  ClusterView& view() { return view_; }
  // Bumped whenever a job, worker, metric or log changes; live views wait on it.
  ChangeNotifier& changes() { return state_.changes; }

  // State changes the transition table (common/job_state.h) refused since
  // construction. Each one is a bug: it is logged as an error naming both
  // states, and the job is failed with that reason (a terminal job is left
  // as it was). The JobManager tests check that it stays 0.
  int64_t illegal_transitions() const {
    absl::MutexLock lock(&state_.mu);
    return state_.illegal_transitions;
  }

 private:
  // Members in dependency order: the state, then each part after those it uses.
  ClusterState state_;
  JobLifecycle lifecycle_;
  UserQuotas quotas_;
  JobPlacer placer_;
  RankSessions ranks_;
  WorkerSessions workers_;
  JobRequests jobs_;
  ClusterView view_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_
