// JobLifecycle: the job state machine over the ClusterState. It makes every
// state change (checked against common/job_state.h and stored through the
// writer), decides an attempt's outcome after a rank exit (succeed, restart,
// requeue a preempted attempt, or fail), counts ranks lost with their worker
// until their lease runs out, reaps finished jobs, and runs the watchdog over
// running attempts (rank_watch.h). The other parts of the JobManager call it
// when what they see ends a rank or an attempt.
//
// Thread-safety: every method requires the state's mutex (the `Locked`
// suffix); it holds no state of its own. Rendezvous callbacks that an ended
// attempt releases are appended to `releases` for the caller to run after
// dropping the lock.
#ifndef TESSERA_COORDINATOR_CORE_JOB_LIFECYCLE_H_
#define TESSERA_COORDINATOR_CORE_JOB_LIFECYCLE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/core/active_job.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/rendezvous_rounds.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class JobLifecycle {
 public:
  // `state` is not owned and must outlive this.
  explicit JobLifecycle(ClusterState* state) : state_(*state) {}

  JobLifecycle(const JobLifecycle&) = delete;
  JobLifecycle& operator=(const JobLifecycle&) = delete;

  // Recover: adopts one stored active job (its ranks' leases count from now).
  absl::Status AdoptLocked(JobRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Changes the job's state, records the event and stores it. A change the
  // transition table refuses is a bug: it is logged and counted
  // (ClusterState::illegal_transitions), and the job fails saying why (a
  // terminal job is left as it was).
  void TransitionLocked(ActiveJob& job, tessera::v1::JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Records an event of the job that is not a state change (a straggler).
  void RecordEventLocked(ActiveJob& job, const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Decides a job's outcome after a rank exit; may order the other ranks stopped.
  void EvaluateLocked(ActiveJob& job, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Ends the current attempt: stops its ranks, then restarts the job (back to
  // QUEUED for a new attempt) if restarts are left, else marks it FAILED. A
  // preempted attempt always requeues and does not count as a restart.
  void FailAttemptLocked(ActiveJob& job, const std::string& reason,
                         RendezvousRounds::Releases* releases, bool preempted = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Counts `rank` as lost: it may run until its lease runs out.
  void LoseRankLocked(ActiveJob& job, const RankRecord& rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Counts every rank on a worker declared dead (for `why`) as lost.
  void LoseWorkerRanksLocked(const std::string& worker, const std::string& why,
                             RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Forgets lost ranks whose lease has run out; returns whether any was.
  bool ExpireLostRanksLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Drops finished jobs whose ranks have all exited.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // The watchdog over every running attempt: fails those with an
  // unresponsive or stalled rank, records stragglers. Returns whether a job
  // changed.
  bool WatchRunningLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Tick: takes what the writer shed of each job's metrics and logs, and
  // forgets snapshots of reaped jobs that the store now has.
  void SyncWithStoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

 private:
  // Adds what the writer shed of the job's metrics and logs to its record
  // (shown by status while it runs), and names the totals once in its events
  // when it has ended.
  void NoteShedLocked(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  ClusterState& state_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_LIFECYCLE_H_
