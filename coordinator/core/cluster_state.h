// ClusterState: the one state the coordinator's core works on, shared by the
// parts of the JobManager (job_manager.h): the active jobs, the worker
// registry, the rendezvous rounds, the users' fair-share usage and what the
// last schedule left waiting. Each part (JobLifecycle, JobPlacer, UserQuotas,
// RankSessions, WorkerSessions, JobRequests, ClusterView) holds a reference
// to it and owns no state of its own, so that a heartbeat can change workers
// and jobs in one step under one lock.
//
// Its members come in three groups: dependencies and options, constant after
// construction; leaf-locked or atomic helpers (change notification, rank
// outputs, live figures, latencies, counters, the Slurm pools), safe from any
// thread with or without `mu`; and the cluster proper, guarded by `mu`.
//
// Thread-safety: take `mu` for every guarded member. Never hold it across
// disk I/O or a callback: store writes go through the StoreWriter, which
// only enqueues, and rendezvous callbacks are collected as Releases and run
// after the lock is dropped (RunReleases).
#ifndef TESSERA_COORDINATOR_CORE_CLUSTER_STATE_H_
#define TESSERA_COORDINATOR_CORE_CLUSTER_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/core/active_job.h"
#include "coordinator/core/change_notifier.h"
#include "coordinator/core/fair_share.h"
#include "coordinator/core/job_manager_options.h"
#include "coordinator/core/latency_histogram.h"
#include "coordinator/core/live_figures.h"
#include "coordinator/core/rank_outputs.h"
#include "coordinator/core/rendezvous_rounds.h"
#include "coordinator/core/slurm/slurm_pool_manager.h"
#include "coordinator/core/worker_registry.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

struct ClusterState {
  // `store`, `writer` and `clock` are not owned and must outlive the state.
  ClusterState(Store* store, StoreWriter* writer, const Clock* clock,
               JobManagerOptions options);

  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  int64_t NowMs() const { return absl::ToUnixMillis(clock->Now()); }
  // Slots that ranks hold, per worker.
  std::map<std::string, std::vector<int32_t>> UsedSlotsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Constant after construction.
  Store* const store;         // Not owned.
  StoreWriter* const writer;  // Not owned.
  const Clock* const clock;   // Not owned.
  const JobManagerOptions options;

  // Each has its own leaf lock (or none is needed).
  ChangeNotifier changes;
  RankOutputs outputs;
  // For /metrics.
  LiveFigures figures;
  LatencyHistogram rendezvous_latency;
  LatencyHistogram scheduling_latency;
  LatencyHistogram heartbeat_latency;
  std::atomic<int64_t> metric_rows_written{0};
  std::atomic<int64_t> metric_rows_refused{0};
  // The Slurm pools, which keep their own state under their own lock (taken
  // after mu, never while a Slurm command runs). Null: none.
  std::atomic<SlurmPoolManager*> slurm{nullptr};  // Not owned.

  // The cluster.
  mutable absl::Mutex mu;
  WorkerRegistry workers ABSL_GUARDED_BY(mu);
  std::map<int64_t, ActiveJob> jobs ABSL_GUARDED_BY(mu);
  RendezvousRounds rendezvous ABSL_GUARDED_BY(mu);
  // Fair share: each user's decayed usage, charged up to last_accrual.
  FairShare usage ABSL_GUARDED_BY(mu);
  absl::Time last_accrual ABSL_GUARDED_BY(mu);
  absl::Time last_usage_save ABSL_GUARDED_BY(mu);
  // Jobs reaped while their last state writes were kept for retry (the
  // store failing): what reads show until the store has them.
  std::map<int64_t, tessera::v1::Job> unstored ABSL_GUARDED_BY(mu);
  // The jobs the last schedule left waiting for workers.
  std::set<int64_t> lacking_workers ABSL_GUARDED_BY(mu);
  // State changes the transition table refused (JobLifecycle::Transition).
  int64_t illegal_transitions ABSL_GUARDED_BY(mu) = 0;
  // Jobs that ended since construction, by terminal state.
  std::map<tessera::v1::JobState, int64_t> jobs_ended ABSL_GUARDED_BY(mu);
};

// Runs released rendezvous callbacks; call without locks held.
void RunReleases(RendezvousRounds::Releases& releases);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_CLUSTER_STATE_H_
