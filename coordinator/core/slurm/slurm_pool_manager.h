// SlurmPoolManager: keeps the coordinator's Slurm allocations and, on each
// Tick, brings them in line with the jobs that wait: it asks Slurm for the
// allocations' states, plans with PlanSlurmPools (slurm_pool.h), cancels and
// submits through a SlurmClient, and returns the pending reasons and the
// workers reserved for the jobs that caused their allocations.
//
// Who sbatch runs as: a pool with submit_as_owner submits as the job's
// owner when Options::can_submit_as_owner (the coordinator runs as root)
// and the owner is a local account other than root; otherwise, or when the
// owner has no account here, as the coordinator's service account. The
// owner is recorded on the allocation either way.
//
// The join credential: before each submission the CredentialWriter is asked
// for a file holding a credential for that allocation, readable by the
// account the job will run as (0600, on storage the nodes see), and the
// credential's id. The path goes into the script; the credential never does.
// The CredentialRevoker invalidates it (and removes the file) once the
// allocation has ended, or at once when it went unused.
//
// The store: each allocation is written to the Store (slurm_allocations) once
// sbatch has returned its id, updated when its Slurm state or cancel changes,
// and removed once it has ended and its credential is revoked. The first
// round of a manager (a restarted coordinator) reads them back, asks Slurm
// for their states, and then, before it plans: revokes the credential of
// each allocation that still holds or waits for nodes while no job needs it
// (its job does not wait for it and none of its workers runs a rank), then
// cancels it, without waiting for the pool's idle_timeout; the ended ones are forgotten
// and their credentials revoked as in any round; the ones a job needs are kept. An
// allocation whose sbatch returned just before the previous coordinator died, before the
// write, is not known to it; but the first round also revokes every join
// credential of a configured pool (named by SlurmCredentialName) that no stored
// allocation holds: the credential of a submission a crash cut short, before
// or after sbatch. The workers of such an allocation are refused at once, and
// a Slurm worker whose join credential is refused exits (worker_agent.h), so
// the allocation ends instead of holding its nodes until its time limit.
//
// Use: the JobPlacer implements SlurmPoolSource and calls TickIfDue() from
// its tick thread WITHOUT holding its own lock; the manager takes the
// source's snapshot (the waiting jobs and the pool workers), runs sbatch,
// squeue and scancel, and keeps the outcome: the JobPlacer asks for a job's
// PendingReason() and the ReservedWorkers() when it schedules, under its own
// lock. Allocation() is for `tessctl status`.
//
// Thread-safety: thread-safe. Ticks run one at a time (tick_mu_); the
// allocations and the outcome of the last round are guarded by mu_, which is
// never held across a Slurm command or a call into the source. Lock order:
// tick_mu_, then the source's lock (inside SlurmSnapshot()), then mu_; a
// caller may hold its own lock while it calls the accessors (they take only
// mu_).
#ifndef TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_MANAGER_H_
#define TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/core/slurm/slurm_client.h"
#include "coordinator/core/slurm/slurm_pool.h"
#include "coordinator/core/slurm/slurm_pool_config.h"
#include "coordinator/store/store.h"

namespace tessera {

struct SlurmPoolManagerOptions {
  // HOST:PORT the workers in the allocations dial (the coordinator's
  // address as the compute nodes reach it).
  std::string coordinator_address;
  // Whether sbatch may run as the job's owner
  // (SlurmCommandClient::CanSubmitAsOtherUsers()).
  bool can_submit_as_owner = false;
  // Directory sbatch runs in (SbatchRequest::working_dir); "/" by default.
  std::string submit_dir = "/";
  SlurmPoolOptions plan;
  // TickIfDue runs a round at most this often.
  absl::Duration interval = absl::Seconds(2);
};

// What a round reads from the jobs and the workers: a consistent copy.
struct SlurmPoolSnapshot {
  // Queued jobs that the registered workers cannot host and that could run
  // if they could, in scheduling order.
  std::vector<WaitingJob> waiting;
  // The live registered workers that belong to a pool. idle_since is not
  // read: the manager tracks when each went idle from the rounds it sees.
  std::vector<SlurmPoolWorker> workers;
};

// Where the pools' snapshot comes from (the JobPlacer). SlurmSnapshot() is
// called with none of the manager's locks held but tick_mu_; it may take the
// source's own lock and must not call back into the manager.
class SlurmPoolSource {
 public:
  virtual ~SlurmPoolSource() = default;
  virtual SlurmPoolSnapshot SlurmSnapshot() = 0;
};

// The name a CredentialWriter gives the credential (the token's name in the
// Store) for `job_id`'s allocation in `pool`: "slurm-POOL-jobJOB". A
// restarted manager revokes the unrevoked join tokens so named, for its
// pools, that no stored allocation holds; names of that form are the
// coordinator's own.
std::string SlurmCredentialName(const std::string& pool, int64_t job_id);

class SlurmPoolManager {
 public:
  // Returns the absolute path of a 0600 file, owned by `run_as` (the
  // service account when empty), holding a join credential scoped to the
  // allocation about to be submitted for `decision`, and the credential's id
  // (a Store token named SlurmCredentialName(decision.pool, decision.job_id)).
  using CredentialWriter = std::function<absl::StatusOr<SlurmCredential>(
      const SlurmSubmitDecision& decision, const std::string& run_as)>;
  // Invalidates a credential CredentialWriter returned (possibly by an
  // earlier coordinator) and removes its file: called once the allocation has
  // ended or was cancelled after a restart, and at once for a credential whose
  // submission failed or was made again for another account.
  using CredentialRevoker = std::function<void(const SlurmCredential& credential)>;

  struct TickResult {
    std::map<int64_t, std::string> pending_reasons;   // job -> reason
    std::map<std::string, int64_t> reserved_workers;  // worker name -> job
    // What happened, one line each ("submitted Slurm allocation 1234 for job
    // 7 in pool cpu as alice"), for the log and the jobs' events.
    std::vector<std::string> events;
  };

  // `client`, `store` and `clock` are not owned and must outlive the manager.
  SlurmPoolManager(std::vector<SlurmPoolConfig> pools, SlurmClient* client, Store* store,
                   const Clock* clock, CredentialWriter credentials,
                   SlurmPoolManagerOptions options, CredentialRevoker revoke = nullptr);

  // One round, when options.interval has passed since the last one: takes
  // `source`'s snapshot, then runs Tick() and logs its events. Returns
  // whether it ran; the caller then reads the new PendingReason()s.
  bool TickIfDue(SlurmPoolSource& source) ABSL_LOCKS_EXCLUDED(tick_mu_, mu_);

  // One round over the given jobs and workers (see the header comment),
  // whenever called. Blocks on Slurm's commands.
  TickResult Tick(const std::vector<WaitingJob>& waiting,
                  std::vector<SlurmPoolWorker> workers) ABSL_LOCKS_EXCLUDED(mu_);

  // What the last round says job `job_id` waits for in Slurm, if anything.
  std::optional<std::string> PendingReason(int64_t job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Worker name -> the waiting job whose allocation it belongs to: the
  // scheduler gives these workers to that job first and to no other job.
  std::map<std::string, int64_t> ReservedWorkers() const ABSL_LOCKS_EXCLUDED(mu_);

  // A worker started inside allocation `slurm_job_id` registered: its batch
  // script runs, so the allocation is running even if the latest squeue
  // (polled every options.interval) still said pending. Unknown ids are ignored.
  void WorkerJoined(const std::string& slurm_job_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The live allocation submitted for `job_id`, if any.
  std::optional<SlurmAllocation> Allocation(int64_t job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<SlurmAllocation> Allocations() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::vector<SlurmPoolConfig>& pools() const { return pools_; }

 private:
  // Who sbatch runs as for a job of `owner` in `pool` ("" = service account).
  std::string SubmitAccount(const SlurmPoolConfig& pool, const std::string& owner) const;
  // Tick's body, under tick_mu_.
  TickResult Round(const std::vector<WaitingJob>& waiting,
                   std::vector<SlurmPoolWorker> workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Fills each worker's idle_since: when this manager first saw it without
  // ranks since it last ran some (the round's time for a new worker).
  void TrackIdle(std::vector<SlurmPoolWorker>& workers, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Tick's steps. Load: on the first round, the allocations a previous
  // coordinator stored. Observe: Slurm's states into allocations_ (the
  // changed ones stored), stale failures dropped; returns what the planner
  // reads, and sets *queried when Slurm answered.
  absl::Status Load(TickResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Load's second step: revokes the join credentials of this manager's pools
  // that none of `stored` holds.
  void RevokeUnrecordedCredentials(const std::vector<SlurmAllocationRecord>& stored,
                                   TickResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  SlurmPoolState Observe(const std::vector<WaitingJob>& waiting,
                         const std::vector<SlurmPoolWorker>& workers, absl::Time now,
                         bool* queried, TickResult* result) ABSL_LOCKS_EXCLUDED(mu_);
  // After a restart, once Slurm has answered: cancels the loaded allocations
  // no job needs and revokes their credentials.
  void CancelUnneeded(const SlurmPoolState& state, TickResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(const std::vector<SlurmCancelDecision>& cancels, TickResult* result)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const std::vector<std::string>& ended, TickResult* result)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Submit(const SlurmSubmitDecision& d, absl::Time now, TickResult* result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the credential, renders the script and runs sbatch as *run_as,
  // falling back to the service account (clearing *run_as) when the owner
  // cannot submit. Returns Slurm's job id and sets *credential to the path the
  // allocation's workers read; credentials not used are revoked.
  absl::StatusOr<std::string> Sbatch(const SlurmPoolConfig& pool,
                                     const SlurmSubmitDecision& d, std::string* run_as,
                                     SlurmCredential* credential, TickResult* result);
  void Revoke(const SlurmCredential& credential) const;
  // Writes the allocation with id `slurm_job_id` as it now stands to the
  // store, or removes it from there when it is no longer tracked.
  void Persist(const std::string& slurm_job_id, TickResult* result)
      ABSL_LOCKS_EXCLUDED(mu_);
  const SlurmPoolConfig* Pool(const std::string& name) const;

  const std::vector<SlurmPoolConfig> pools_;
  SlurmClient* const client_;  // Not owned.
  Store* const store_;         // Not owned.
  const Clock* const clock_;   // Not owned.
  const CredentialWriter credentials_;
  const CredentialRevoker revoke_;  // may be empty
  const SlurmPoolManagerOptions options_;

  absl::Mutex tick_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one Tick at a time
  absl::Time last_tick_ ABSL_GUARDED_BY(tick_mu_) = absl::InfinitePast();
  // Whether the stored allocations were read back (Load), and those of them
  // not yet checked for a job that needs them (CancelUnneeded).
  bool loaded_ ABSL_GUARDED_BY(tick_mu_) = false;
  std::set<std::string> unchecked_ ABSL_GUARDED_BY(tick_mu_);
  mutable absl::Mutex mu_;
  std::vector<SlurmAllocation> allocations_ ABSL_GUARDED_BY(mu_);
  std::vector<SlurmSubmitFailure> failures_ ABSL_GUARDED_BY(mu_);
  // Pool worker -> when it went idle (InfiniteFuture while it runs ranks).
  std::map<std::string, absl::Time> idle_since_ ABSL_GUARDED_BY(mu_);
  // The last round's outcome (TickResult's).
  std::map<int64_t, std::string> pending_reasons_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> reserved_workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_MANAGER_H_
