// JobPlacer: places queued jobs over the ClusterState. It builds the queue
// (holding a job while a rank of its earlier attempt may still run), orders
// it by priority and fair share (UserQuotas), runs the pure scheduler
// (scheduler.h) over the workers' free slots, starts each placed attempt and
// opens its rendezvous, and keeps why each other job waits. Jobs that caused
// a Slurm allocation are placed first on its workers; it is the Slurm pools'
// view of the queue (SlurmPoolSource) and ticks them.
//
// Thread-safety: ScheduleLocked requires the state's mutex; TickSlurm and
// SlurmSnapshot take it (never while a Slurm command runs). It holds no state
// of its own.
#ifndef TESSERA_COORDINATOR_CORE_JOB_PLACER_H_
#define TESSERA_COORDINATOR_CORE_JOB_PLACER_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "coordinator/core/active_job.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/job_lifecycle.h"
#include "coordinator/core/scheduler.h"
#include "coordinator/core/slurm/slurm_pool_manager.h"
#include "coordinator/core/user_quotas.h"

namespace tessera {

class JobPlacer : public SlurmPoolSource {
 public:
  // None is owned; each must outlive this.
  JobPlacer(ClusterState* state, JobLifecycle* lifecycle, UserQuotas* quotas)
      : state_(*state), lifecycle_(*lifecycle), quotas_(*quotas) {}

  JobPlacer(const JobPlacer&) = delete;
  JobPlacer& operator=(const JobPlacer&) = delete;

  // Runs the scheduler over queued jobs and applies its placements.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // One round of the Slurm pools when their interval has passed: the pool
  // manager submits allocations for jobs the workers cannot host, cancels
  // idle or drained ones, and keeps why each job waits, which this shows on
  // the queued jobs. Runs sbatch, squeue and scancel without holding the lock.
  void TickSlurm() ABSL_LOCKS_EXCLUDED(state_.mu);
  // The pools' view of the queue and the workers (SlurmPoolSource): the
  // queued jobs the last schedule left lacking workers and the live pool
  // workers. Takes the lock; the pool manager calls it from TickSlurm.
  SlurmPoolSnapshot SlurmSnapshot() override ABSL_LOCKS_EXCLUDED(state_.mu);

 private:
  // The queued jobs that may start their next attempt; records why the others
  // are held.
  std::vector<PendingJob> QueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Places, one at a time, the jobs that caused a Slurm allocation on the
  // allocation's workers, and takes those workers out of `inventory`.
  // Returns the jobs left for the common schedule.
  std::vector<PendingJob> PlaceOnReservedLocked(std::vector<PendingJob> queue,
                                                std::vector<WorkerInventory>& inventory,
                                                const SchedulerOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Starts a new attempt of the job on the placement's slots.
  void PlaceLocked(const Placement& placement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  void SetPendingReasonLocked(ActiveJob& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  ClusterState& state_;      // Not owned.
  JobLifecycle& lifecycle_;  // Not owned.
  UserQuotas& quotas_;       // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_PLACER_H_
