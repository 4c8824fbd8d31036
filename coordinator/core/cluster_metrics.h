// ClusterMetrics: one consistent reading of the coordinator's state for its
// /metrics page (coordinator/api/metrics_page.h turns it into Prometheus'
// text format). Plain data: counts, the running jobs' figures and the latency
// histograms, with nothing of a spec, an environment or a secret in it.
//
// Every set in it is bounded by the cluster, not by what users send: the
// running jobs hold at least one slot each, states, kinds and pools are fixed
// sets, and each worker's GPU readings are bounded by the registry.
//
// Thread-safety: a value; ClusterView::ReadClusterMetrics() fills it under its lock.
#ifndef TESSERA_COORDINATOR_CORE_CLUSTER_METRICS_H_
#define TESSERA_COORDINATOR_CORE_CLUSTER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu_monitor.h"
#include "coordinator/core/latency_histogram.h"
#include "coordinator/core/live_figures.h"

namespace tessera {

// Worker states as /metrics names them. A worker is in exactly one: dead
// (declared dead, not registered again), else drained (draining and nothing
// of a job runs there) or draining, else alive (heard from recently) or
// suspect (silent, not yet declared dead).
inline constexpr char kWorkerAlive[] = "alive";
inline constexpr char kWorkerSuspect[] = "suspect";
inline constexpr char kWorkerDead[] = "dead";
inline constexpr char kWorkerDraining[] = "draining";
inline constexpr char kWorkerDrained[] = "drained";

struct ClusterMetrics {
  // Active jobs by state ("queued", "scheduled", "running"; each present).
  std::map<std::string, int64_t> jobs_by_state;
  // Jobs that ended since the coordinator started, by state ("succeeded",
  // "failed", "cancelled"; each present).
  std::map<std::string, int64_t> jobs_ended;
  // How long the oldest queued job has waited (0: none queued).
  double oldest_queued_seconds = 0;
  // Workers by state (the k*Worker names above; each present).
  std::map<std::string, int64_t> workers_by_state;
  // Slots by device kind ("cpu", "gpu"; each present) of the workers not
  // declared dead.
  struct Slots {
    int64_t total = 0;
    int64_t used = 0;
  };
  std::map<std::string, Slots> slots;
  // The latest readings of each GPU of the workers not declared dead (as
  // WorkerRegistry::Gpus keeps them: at most kMaxWorkerGpuReadings each), by
  // worker name.
  std::map<std::string, std::vector<GpuReading>> worker_gpus;

  struct RunningJob {
    int64_t id = 0;
    std::string name;
    std::string owner;
    int32_t ranks = 0;
    int32_t restarts = 0;  // attempts after the first, preemptions not counted
    // Each rank's latest reported figures (throughput, step time, memory).
    LiveFigures::RankFigures figures;
    // The worker each rank runs on, by rank.
    std::vector<std::string> rank_workers;
  };
  std::vector<RunningJob> running;  // by id

  // The trials of the running searches by status ("running", "paused",
  // "completed", "failed"; SearchManager::RunningTrialsByStatus). ClusterView
  // knows no searches: HttpApi adds them to its reading.
  std::map<std::string, int64_t> search_trials;

  // Slurm allocations the coordinator tracks, (pool, state) -> count; state
  // is "pending", "running", "completing", "ended" or "other".
  std::map<std::pair<std::string, std::string>, int64_t> slurm_allocations;

  // Metric rows acknowledged as stored, and refused (over a job's limits, for
  // a stale attempt or a job no longer active, or by a failing store).
  int64_t metric_rows_written = 0;
  int64_t metric_rows_refused = 0;

  // From placement until every rank has joined the rendezvous.
  LatencyHistogram::Snapshot rendezvous;
  // One pass of the scheduler over the queue (wall time).
  LatencyHistogram::Snapshot scheduling;
  // A worker's heartbeat, handled (wall time).
  LatencyHistogram::Snapshot heartbeat;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_CLUSTER_METRICS_H_
