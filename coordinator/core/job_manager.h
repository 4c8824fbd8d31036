// JobManager: the coordinator's core. It owns the in-memory view of active
// jobs (ActiveJob) and drives the job state machine: it places queued jobs
// with the scheduler, turns worker heartbeats into rank state changes and
// launch/stop orders, decides each attempt's outcome (restart or end), and
// coordinates rendezvous. The gRPC services are thin adapters over it.
//
// It delegates by concern: WorkerRegistry keeps the workers (sessions,
// liveness) and the rules that reconcile a heartbeat with the coordinator's
// beliefs; RankOutputs stores and reads ranks' logs and metrics; Schedule()
// places ranks; RendezvousRounds gathers an attempt's ranks.
//
// Use: construct, Recover() once before serving, then call the RPC methods
// from any thread, and Tick() periodically (the coordinator's monitor thread).
//
// Durability: a job is written to the store before Submit returns. Later
// changes are enqueued on the StoreWriter while the lock is held (so they
// reach disk in the order they happened) and written by its thread, so no
// method holds the lock across disk I/O. Reads of jobs that are no longer
// active flush the writer first.
//
// Thread-safety: every public method is safe from any thread. One mutex guards
// the jobs, the worker registry and the rendezvous together (a heartbeat
// changes workers and jobs in one step); RankOutputs has its own leaf lock.
// Callbacks passed in are run without the lock held.
#ifndef TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_
#define TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "coordinator/core/active_job.h"
#include "coordinator/core/caller.h"
#include "coordinator/core/change_notifier.h"
#include "coordinator/core/cluster_metrics.h"
#include "coordinator/core/fair_share.h"
#include "coordinator/core/latency_histogram.h"
#include "coordinator/core/live_figures.h"
#include "coordinator/core/rank_outputs.h"
#include "coordinator/core/rank_watch.h"
#include "coordinator/core/rendezvous_rounds.h"
#include "coordinator/core/scheduler.h"
#include "coordinator/core/slurm/slurm_pool_manager.h"
#include "coordinator/core/worker_registry.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// What one user may hold at once. The defaults fit a lab of about 20 people
// sharing a few dozen slots. Admins are exempt. Exceeding one is
// ResourceExhausted, naming the limit and its flag.
struct UserLimits {
  // Jobs a user may have queued (waiting for slots) at once (--max-queued-jobs).
  int max_queued_jobs = 100;
  // Ranks a user may have placed (scheduled or running) at once
  // (--max-running-ranks).
  int max_running_ranks = 64;
  // The share of the cluster's slots one user may hold while another user's
  // job waits (--max-slot-share). An idle cluster is used whole.
  double max_slot_share = 0.5;
  // The highest `priority` a non-admin may submit (--max-user-priority).
  int max_priority = 10;
};

// What one job may store (--max-metric-rows, --max-log-bytes,
// --max-metric-names). Past a limit, reports are refused with ResourceExhausted
// and the trainer or worker stops sending them; the job itself goes on.
struct JobLimits {
  int64_t max_metric_rows = 2'000'000;
  int64_t max_log_bytes = int64_t{256} << 20;
  int max_metric_names = 64;
};

struct JobManagerOptions {
  // Limits applied to submitted specs.
  SpecLimits spec_limits;
  // How often workers are asked to heartbeat.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A worker silent for longer than this is suspect: it gets no new ranks.
  absl::Duration worker_suspect_after = absl::Seconds(3);
  // A worker silent for longer than this is declared dead: its ranks count as
  // lost (their jobs fail or restart) and its session epoch is fenced, so when
  // it comes back it must register again and stops what it still runs.
  absl::Duration worker_dead_after = absl::Seconds(15);
  // An attempt whose ranks have not all joined the rendezvous this long after
  // placement fails, naming the missing ranks.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // How long a blocked job lets later jobs backfill before it holds the queue.
  absl::Duration reserve_after = absl::Minutes(10);
  // Most metric points accepted in one report.
  int max_points_per_report = 10000;
  // The trainer lease (RenewLeaseRequest in tessera.proto): a trainer that
  // has not renewed it for this long stops itself, so a coordinator down for
  // longer stops every running job (they restart from their checkpoints when
  // allowed). A job whose ranks were lost with their worker restarts only
  // once each lost rank is confirmed stopped by its worker or its lease has
  // run out here, which after a partition takes about this long.
  absl::Duration trainer_lease = absl::Seconds(90);
  // The lease tessera-train assumes until its first renewal succeeds
  // (kFirstContactLease in worker/trainer/run/lease.h).
  absl::Duration trainer_first_contact_lease = absl::Seconds(15);
  // A lost rank's lease has run out here `lease * (1 + ratio) + margin` after
  // the last renewal received: room for clocks that run at different rates.
  double trainer_lease_margin_ratio = 0.1;
  absl::Duration trainer_lease_margin = absl::Seconds(1);
  // Per-user and per-job limits.
  UserLimits user_limits;
  JobLimits job_limits;
  // Fair share: the queue is ordered by priority, then by each owner's
  // fair-share factor (fair_share.h), then by age. Off (--no-fair-share): by
  // priority, then age, first come first served.
  bool fair_share = true;
  // Fair share: the half-life of each user's recorded usage (slot-seconds).
  absl::Duration usage_half_life = absl::Hours(24);
  // How often the usage is saved to the store (it survives restarts).
  absl::Duration usage_save_interval = absl::Minutes(1);
  // ListJobs' page size when the request names none, and the largest allowed.
  int default_list_limit = 100;
  int max_list_limit = 1000;
  // The watchdog over running attempts (rank_watch.h); a job's spec may
  // override it.
  RankWatchOptions watchdog;
  // How often trainers report progress (and so renew their lease) at least
  // (--progress-interval): RenewLeaseResponse.report_every_ms.
  absl::Duration progress_report_interval = absl::Seconds(2);
  // How long a drain waits for ranks to checkpoint and exit before it stops
  // them (--drain-timeout); DrainWorker may name another.
  absl::Duration drain_timeout = absl::Minutes(2);
  // A heartbeat reporting exits waits at most this long for them to be
  // durable before it acknowledges them (unacknowledged exits are reported
  // again).
  absl::Duration exit_ack_timeout = absl::Seconds(5);
};

// Where a job comes from: a sweep point, or (all zero) a plain submit, and who
// submitted it.
struct JobOrigin {
  int64_t sweep_id = 0;
  int32_t sweep_point = 0;
  // Who submitted it: the user token's name (empty without authentication).
  std::string owner;
  // Whether the submitter is an admin: exempt from the user limits.
  bool admin = false;
};

// A page of ListJobs.
struct JobList {
  std::vector<tessera::v1::Job> jobs;
  int64_t next_before_id = 0;  // JobFilter::before_id of the next page; 0: none
};

// One user's line in GetShare: their recent usage and fair-share factor.
struct UserShare {
  std::string user;
  double usage_slot_seconds = 0;  // decayed by the usage half-life
  double factor = 1;              // 1: no recent use; toward 0: heavy use
  int32_t running_ranks = 0;
  int32_t queued_jobs = 0;
};

class JobManager : public SlurmPoolSource {
 public:
  // `store`, `writer` and `clock` are not owned and must outlive the manager.
  JobManager(Store* store, StoreWriter* writer, const Clock* clock,
             JobManagerOptions options);

  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads workers and non-terminal jobs from the store. Call once, before serving.
  absl::Status Recover();

  // Validates and stores a job, then tries to place it. Returns the job id; a
  // repeated `client_request_id` of the same owner returns the first job's id.
  // ResourceExhausted past the owner's queued-jobs limit; PermissionDenied for
  // a non-admin's priority above the cap.
  absl::StatusOr<int64_t> Submit(const tessera::v1::JobSpec& spec,
                                 const std::string& spec_yaml,
                                 const std::string& client_request_id,
                                 const JobOrigin& origin = JobOrigin());

  // The reads and actions below act for `caller`: a job the caller may not see
  // (Caller::MaySee) is NotFound, as if it did not exist.
  absl::StatusOr<tessera::v1::Job> GetJob(const Caller& caller, int64_t job_id);
  // Newest first, at most filter.limit (0: default_list_limit; at most
  // max_list_limit unless the caller is an admin). A non-admin sees only their
  // own jobs. Lists carry no spec_yaml and no env values.
  absl::StatusOr<JobList> ListJobs(const Caller& caller, JobFilter filter = {});
  // Slots used by jobs the caller may not see are counted, not named.
  std::vector<tessera::v1::Worker> ListWorkers(const Caller& caller);
  absl::StatusOr<std::vector<tessera::v1::MetricPoint>> GetMetrics(
      const Caller& caller, const tessera::v1::GetMetricsRequest& request);
  // NotFound unless the caller may see the job.
  absl::Status CheckVisible(const Caller& caller, int64_t job_id);
  // Usage and fair-share factor per user: every user for an admin, the
  // caller's own line otherwise.
  std::vector<UserShare> GetShare(const Caller& caller);

  // Registers a worker (a new session). Every rank the coordinator believes
  // runs there and that the request does not list is lost at once.
  absl::StatusOr<tessera::v1::RegisterWorkerResponse> RegisterWorker(
      const tessera::v1::RegisterWorkerRequest& request);
  // Admin only (PermissionDenied otherwise; NotFound for an unknown worker).
  // Drain: the worker gets no new ranks; each running rank there is sent
  // SIGUSR1 (checkpoint and exit with the preempted code) and its job
  // requeues without counting a restart; ranks still running after `timeout`
  // (zero: drain_timeout) are stopped. Undrain: it takes ranks again.
  absl::StatusOr<tessera::v1::Worker> DrainWorker(const Caller& caller,
                                                  const std::string& name,
                                                  absl::Duration timeout, bool undrain);
  absl::StatusOr<tessera::v1::HeartbeatResponse> Heartbeat(
      const tessera::v1::HeartbeatRequest& request);
  // Whether a worker of this name is registered and not declared dead.
  bool WorkerLive(const std::string& name);

  // Answers through `done` once every rank of the attempt has joined, or at
  // once with an error for a bad request.
  void Rendezvous(
      const tessera::v1::RendezvousRequest& request,
      std::function<void(absl::StatusOr<tessera::v1::RendezvousResponse>)> done);
  // Calls `done` once the points are durable (or with the error).
  void ReportMetrics(const tessera::v1::ReportMetricsRequest& request,
                     std::function<void(absl::Status)> done);
  absl::Status ReportResult(const tessera::v1::ReportResultRequest& request);
  // Renews the lease of a current rank and returns its duration. Aborted for
  // a rank that is no longer current (the trainer then stops), NotFound for a
  // job that is not active.
  // The request's progress report feeds the attempt's watchdog.
  absl::StatusOr<absl::Duration> RenewLease(
      const tessera::v1::RenewLeaseRequest& request);
  // How often trainers should renew (and report progress) at least.
  absl::Duration progress_report_interval() const {
    return options_.progress_report_interval;
  }

  // Stops every rank of the job and records CANCELLED; returns the job's state
  // afterwards. FailedPrecondition when the job had already ended.
  absl::StatusOr<tessera::v1::JobState> CancelJob(const Caller& caller, int64_t job_id);

  // Stores a piece of a rank's log shipped by its worker. PermissionDenied
  // unless that rank of that attempt was assigned to the calling worker.
  absl::StatusOr<tessera::v1::ShipLogsResponse> ShipLogs(
      const tessera::v1::ShipLogsRequest& request);
  absl::StatusOr<tessera::v1::GetLogsResponse> GetLogs(
      const Caller& caller, const tessera::v1::GetLogsRequest& request);

  // Periodic checks, run by the coordinator's monitor thread (and by tests with
  // a fake clock): declares silent workers dead, fails attempts whose
  // rendezvous timed out, runs the watchdog over running attempts (ending
  // those with an unresponsive or stalled rank, flagging stragglers), and
  // ends drains whose time is up.
  void Tick();

  // Slurm pools (slurm_pool_manager.h), not owned; null (the default): none.
  // Set once, before serving.
  void SetSlurmPools(SlurmPoolManager* pools) { slurm_.store(pools); }
  // One round of the Slurm pools when their interval has passed: the pool
  // manager submits allocations for jobs the workers cannot host, cancels
  // idle or drained ones, and keeps why each job waits, which this shows on
  // the queued jobs. Runs sbatch, squeue and scancel without holding the
  // lock; called by the monitor thread after Tick().
  void TickSlurm() ABSL_LOCKS_EXCLUDED(mu_);
  // The pools' view of the queue and the workers (SlurmPoolSource): the
  // queued jobs the last schedule left lacking workers and the live pool
  // workers. Takes the lock; the pool manager calls it from TickSlurm.
  SlurmPoolSnapshot SlurmSnapshot() override ABSL_LOCKS_EXCLUDED(mu_);

  // The cluster as /metrics shows it: jobs, queue, workers, slots, the
  // running jobs' figures, Slurm allocations, metric rows and latencies
  // (cluster_metrics.h). Takes the lock briefly; no store I/O.
  ClusterMetrics ReadClusterMetrics() ABSL_LOCKS_EXCLUDED(mu_);

  // Bumped whenever a job, worker, metric or log changes; live views wait on it.
  ChangeNotifier& changes() { return changes_; }

  // Whether the store takes writes (false while the disk is full or failing).
  bool StoreHealthy() const { return writer_->healthy(); }
  // The store's mode for health checks: kServing; kDegraded while metric rows
  // and log lines are shed below the database's reserve (job state is still
  // stored); kNotServing while state writes fail (kept for retry).
  enum class StoreMode { kServing, kDegraded, kNotServing };
  StoreMode GetStoreMode() const;

  // Fails every waiting rendezvous with Unavailable so that the RPC server can
  // shut down; trainers retry against the restarted coordinator.
  void Shutdown();

  // State changes the transition table (common/job_state.h) refused since
  // construction. Each one is a bug: it is logged as an error naming both
  // states, and the job is failed with that reason (a terminal job is left
  // as it was). The JobManager tests check that it stays 0.
  int64_t illegal_transitions() const {
    absl::MutexLock lock(&mu_);
    return illegal_transitions_;
  }

 private:
  // Recover: adds one stored active job.
  absl::Status RecoverJobLocked(JobRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Transition(ActiveJob& job, tessera::v1::JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Runs the scheduler over queued jobs and applies its placements.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queued jobs that may start their next attempt; records why the others
  // are held.
  std::vector<PendingJob> QueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots that ranks hold, per worker.
  std::map<std::string, std::vector<int32_t>> UsedSlotsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a new attempt of the job on the placement's slots.
  void PlaceLocked(const Placement& placement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPendingReasonLocked(ActiveJob& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Heartbeat steps, in order. The two Reconcile steps return whether a job
  // changed (then finished jobs are reaped and queued ones placed).
  //
  // Applies the verdict on each rank the worker lists; stop orders and
  // acknowledged exits go into `response`.
  // Exits recorded are appended to `recorded` when it is not null.
  bool ReconcileReportedRanksLocked(const HeartbeatReport& report,
                                    tessera::v1::HeartbeatResponse& response,
                                    RendezvousRounds::Releases* releases,
                                    std::vector<RankRecord>* recorded = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the exit of the current rank of `job` that `reported` names, and
  // decides the job's outcome.
  // Appends the record to `recorded` when it is not null.
  void RecordExitLocked(ActiveJob& job, const tessera::v1::LocalRank& reported,
                        RendezvousRounds::Releases* releases,
                        std::vector<RankRecord>* recorded = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the verdict on each rank of an earlier attempt the worker no
  // longer lists: it stopped, so its slot is free and no restart waits for it.
  bool ReconcileUnlistedRanksLocked(const HeartbeatReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Orders for the worker: launches not yet seen running, stops not yet done,
  // and, on a draining worker, preemption of its running ranks.
  void AddOrdersLocked(const HeartbeatReport& report,
                       tessera::v1::HeartbeatResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts each current rank the report's worker no longer runs (kLost) as
  // exited, and decides its job's outcome. Returns whether any was.
  bool LoseUnlistedRanksLocked(const HeartbeatReport& report,
                               RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick: the watchdog over every running attempt.
  bool WatchRunningLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick: ends the attempts still on a draining worker past its deadline, or
  // placed there but not started.
  bool EnforceDrainsLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an event of the job that is not a state change (a straggler).
  void RecordEventLocked(ActiveJob& job, const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds what the writer shed of the job's metrics and logs to its record
  // (shown by status while it runs), and names the totals once in its events
  // when it has ended.
  void NoteShedLocked(ActiveJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the jobs in `list` whose current state is not yet stored, and
  // replaces stored jobs with the snapshots of those reaped unstored.
  void MarkUnstoredLocked(std::vector<tessera::v1::Job>& list) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tick steps; each returns whether a job changed.
  bool DeclareSilentWorkersDeadLocked(RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ExpireLostRanksLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FailTimedOutRendezvousLocked(absl::Time now, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Decides a job's outcome after a rank exit; may order the other ranks stopped.
  void EvaluateLocked(ActiveJob& job, RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current attempt: stops its ranks, then restarts the job (back to
  // QUEUED for a new attempt) if restarts are left, else marks it FAILED. A
  // preempted attempt always requeues and does not count as a restart.
  void FailAttemptLocked(ActiveJob& job, const std::string& reason,
                         RendezvousRounds::Releases* releases, bool preempted = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts every rank on a worker declared dead (for `why`) as lost.
  void LoseWorkerRanksLocked(const std::string& worker, const std::string& why,
                             RendezvousRounds::Releases* releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops finished jobs whose ranks have all exited.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `rank` as lost: it may run until its lease runs out.
  void LoseRankLocked(ActiveJob& job, const RankRecord& rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMs() const;
  // Submit's per-user limits (priority cap, world size, queued jobs).
  absl::Status CheckUserLimits(const tessera::v1::JobSpec& spec, const JobOrigin& origin);
  // The owner of a job, active or stored; NotFound when there is none.
  absl::StatusOr<std::string> OwnerOf(int64_t job_id);
  // ReadClusterMetrics' steps.
  void AddWorkerMetricsLocked(ClusterMetrics& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddJobMetricsLocked(ClusterMetrics& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddSlurmMetrics(ClusterMetrics& out) ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a metric report's rows as refused and passes `status` on.
  void RefuseMetrics(size_t rows, const absl::Status& status,
                     const std::function<void(absl::Status)>& done);
  // Charges running ranks' slot-seconds to their owners up to now.
  void AccrueUsageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per owner: ranks placed and jobs queued.
  std::map<std::string, UserLoad> LoadByUserLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;         // Not owned.
  StoreWriter* const writer_;  // Not owned.
  const Clock* const clock_;   // Not owned.
  const JobManagerOptions options_;

  ChangeNotifier changes_;
  RankOutputs outputs_;
  // For /metrics; each has its own leaf lock.
  LiveFigures figures_;
  LatencyHistogram rendezvous_latency_;
  LatencyHistogram scheduling_latency_;
  LatencyHistogram heartbeat_latency_;
  std::atomic<int64_t> metric_rows_written_{0};
  std::atomic<int64_t> metric_rows_refused_{0};
  mutable absl::Mutex mu_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  int64_t illegal_transitions_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs that ended since construction, by terminal state.
  std::map<tessera::v1::JobState, int64_t> jobs_ended_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, ActiveJob> jobs_ ABSL_GUARDED_BY(mu_);
  RendezvousRounds rendezvous_ ABSL_GUARDED_BY(mu_);
  FairShare usage_ ABSL_GUARDED_BY(mu_);
  absl::Time last_accrual_ ABSL_GUARDED_BY(mu_);
  absl::Time last_usage_save_ ABSL_GUARDED_BY(mu_);
  // Jobs reaped while their last state writes were kept for retry (the
  // store failing): what reads show until the store has them.
  std::map<int64_t, tessera::v1::Job> unstored_ ABSL_GUARDED_BY(mu_);
  // The jobs the last schedule left waiting for workers.
  std::set<int64_t> lacking_workers_ ABSL_GUARDED_BY(mu_);
  // The Slurm pools, which keep their own state under their own lock (taken
  // after mu_, never while a Slurm command runs).
  std::atomic<SlurmPoolManager*> slurm_{nullptr};  // Not owned.
};

// Runs released rendezvous callbacks; call without locks held.
void RunReleases(RendezvousRounds::Releases& releases);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_MANAGER_H_
