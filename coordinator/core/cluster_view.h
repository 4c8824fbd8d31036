// ClusterView: the cluster as monitoring sees it, read from the ClusterState:
// the /metrics figures (jobs, queue, workers, slots, the running jobs'
// figures, Slurm allocations, metric rows and latencies; cluster_metrics.h)
// and the store's mode for health checks. The HTTP API's /metrics and health
// routes and the coordinator's monitor use this class alone.
//
// Thread-safety: every method is safe from any thread. ReadClusterMetrics
// takes the state's mutex briefly and does no store I/O; the store's mode is
// read from the writer without it.
#ifndef TESSERA_COORDINATOR_CORE_CLUSTER_VIEW_H_
#define TESSERA_COORDINATOR_CORE_CLUSTER_VIEW_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "coordinator/core/cluster_metrics.h"
#include "coordinator/core/cluster_state.h"

namespace tessera {

class ClusterView {
 public:
  // `state` is not owned and must outlive this.
  explicit ClusterView(ClusterState* state) : state_(*state) {}

  ClusterView(const ClusterView&) = delete;
  ClusterView& operator=(const ClusterView&) = delete;

  ClusterMetrics ReadClusterMetrics() ABSL_LOCKS_EXCLUDED(state_.mu);

  // The most slots the cluster could offer at once: those of the live
  // workers not draining, plus what each Slurm pool may add (max_allocations
  // x max_nodes x its slots per node; a pool without a limit on allocations
  // has no bound, INT64_MAX). What a search's concurrency is checked against.
  int64_t SlotCapacity() ABSL_LOCKS_EXCLUDED(state_.mu);

  // Whether the store takes writes (false while the disk is full or failing).
  bool StoreHealthy() const { return state_.writer->healthy(); }
  // The store's mode for health checks: kServing; kDegraded while metric rows
  // and log lines are shed below the database's reserve (job state is still
  // stored); kNotServing while state writes fail (kept for retry).
  enum class StoreMode { kServing, kDegraded, kNotServing };
  StoreMode GetStoreMode() const;

 private:
  // ReadClusterMetrics' steps.
  void AddWorkerMetricsLocked(ClusterMetrics& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  void AddJobMetricsLocked(ClusterMetrics& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  void AddSlurmMetrics(ClusterMetrics& out) ABSL_LOCKS_EXCLUDED(state_.mu);

  ClusterState& state_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_CLUSTER_VIEW_H_
