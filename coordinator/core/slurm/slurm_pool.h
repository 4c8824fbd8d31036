// Slurm pool decisions: a pure function from what the coordinator knows (the
// jobs that wait for workers, the pools, the allocations it submitted and
// their Slurm states, the pools' workers) to what to do (allocations to
// submit, allocations to cancel, allocations to forget) and what to tell the
// users whose jobs wait ("waiting for Slurm allocation 1234 (PD: Resources)").
//
// The caller (SlurmPoolManager, ticked by the JobManager) does the I/O around it:
// SlurmClient::Query for the allocations' states, then PlanSlurmPools, then
// Submit / Cancel through the SlurmClient, recording each new allocation
// with state "PD" (and each failed submission as a SlurmSubmitFailure).
//
// Rules, per allocation:
//   - ended (final state, or Slurm no longer lists it): forget it. Its
//     workers' ranks are lost like any dead worker's; the job restarts
//     from its checkpoint on a new allocation when max_restarts allows.
//   - pending, or running with no worker registered yet, and its job no
//     longer waits (placed elsewhere, cancelled): cancel it.
//   - running, every registered worker draining and none running a rank
//     (Slurm's --signal warning, a preemption, an admin's drain): cancel it.
//   - running, fewer workers registered than nodes once register_timeout
//     has passed since it was first seen running: cancel it.
//   - running, its job no longer waiting, and every worker idle for the
//     pool's idle_timeout: cancel it.
// Per waiting job, in the order given (the scheduler's):
//   - an allocation already serves it: its pending reason says which and
//     in what Slurm state;
//   - else the first pool, in file order, that can host its shape (see
//     AllocationNodes) and has room under max_allocations gets a submission,
//     unless a submission for that job to that pool failed less than
//     retry_after ago; a job of kind kAny tries the CPU pools before the GPU
//     pools;
//   - else the reason says why no pool takes it.
//
// Thread-safety: pure functions.
#ifndef TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_H_
#define TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/core/slurm/slurm_pool_config.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// A join credential written for one allocation (SlurmPoolManager's
// CredentialWriter): the file its workers read, and the id the revoker needs
// (the token's). Empty once revoked.
struct SlurmCredential {
  std::string path;
  int64_t id = 0;
  bool empty() const { return path.empty() && id == 0; }
};

// An allocation the coordinator submitted and still tracks.
struct SlurmAllocation {
  std::string pool;
  std::string slurm_job_id;
  int64_t job_id = 0;        // the tessera job it was submitted for
  std::string owner;         // the job's owner (whom sbatch ran as, or recorded for)
  std::string submitted_as;  // whom sbatch ran as; empty: the service account
  int32_t nodes = 0;
  absl::Time submitted_at = absl::InfinitePast();
  // From the latest SlurmClient::Query. An empty state means Slurm no longer
  // lists it (ended and purged); set "PD" right after a successful Submit.
  std::string state;
  std::string reason;
  // When the coordinator first saw it running; InfiniteFuture until then.
  absl::Time running_since = absl::InfiniteFuture();
  // A cancel was already sent; the allocation is only waited for now.
  bool cancel_sent = false;
  // The join credential its workers read.
  SlurmCredential credential;
};

// A registered worker that belongs to a pool (RegisterWorkerRequest.pool).
struct SlurmPoolWorker {
  std::string name;
  std::string pool;
  std::string slurm_job_id;
  int32_t running_ranks = 0;
  // When it last stopped running ranks, or registered if it never ran any.
  absl::Time idle_since = absl::InfinitePast();
  bool draining = false;
};

// The kind of pool nodes a job may run on.
enum class SlurmNodeKind {
  kCpu,  // CPU pools only
  kGpu,  // GPU pools only
  kAny,  // either: CPU pools first, GPU pools when no CPU pool takes it
};

// The kind a job asks for (docs/slurm.md, "Which pool serves a job"):
// trainer.device "cuda" asks for GPUs and "cpu" for CPUs. "auto" (the
// default) asks for GPUs when the spec asks for bf16 or fp16 precision,
// which takes effect only on CUDA (on a CPU the trainer runs fp32); in fp32
// it runs the same on either kind, so it may use either.
SlurmNodeKind SlurmNodeKindOf(const tessera::v1::TrainerConfig& trainer);

// A queued job that the registered workers cannot host and that could run
// if they could (not one held by owner limits or the queue's reservation).
struct WaitingJob {
  int64_t job_id = 0;
  int32_t world_size = 0;
  int32_t nodes = 0;                         // exact number of workers; 0: any
  int32_t per_node = 0;                      // ranks per worker; 0: any
  SlurmNodeKind kind = SlurmNodeKind::kCpu;  // SlurmNodeKindOf(its trainer)
  std::string owner;
};

// The last failed submission of one job to one pool.
struct SlurmSubmitFailure {
  std::string pool;
  int64_t job_id = 0;
  std::string error;
  absl::Time at = absl::InfinitePast();
};

struct SlurmPoolState {
  std::vector<WaitingJob> waiting;  // in scheduling order
  std::vector<SlurmAllocation> allocations;
  std::vector<SlurmPoolWorker> workers;
  std::vector<SlurmSubmitFailure> failures;
};

struct SlurmPoolOptions {
  // A pool is tried again for a job this long after a failed sbatch.
  absl::Duration retry_after = absl::Seconds(60);
};

struct SlurmSubmitDecision {
  std::string pool;
  int64_t job_id = 0;
  int32_t nodes = 0;
  std::string owner;
};

struct SlurmCancelDecision {
  std::string slurm_job_id;
  std::string reason;  // for the log and the job's events, e.g. "idle for 5m"
};

struct SlurmPoolPlan {
  std::vector<SlurmSubmitDecision> submit;
  std::vector<SlurmCancelDecision> cancel;
  std::vector<std::string> forget;  // Slurm job ids of allocations that have ended
  // Job id -> what it waits for, for the jobs the pools act on.
  std::map<int64_t, std::string> pending_reasons;
  // Worker name -> the job whose allocation it belongs to, while that job
  // waits: the scheduler should give these workers to that job first.
  std::map<std::string, int64_t> reserved_workers;
};

SlurmPoolPlan PlanSlurmPools(const std::vector<SlurmPoolConfig>& pools,
                             const SlurmPoolState& state, absl::Time now,
                             const SlurmPoolOptions& options = {});

// The nodes an allocation of `pool` needs for `job`: job.nodes when set,
// else world_size over per_node (or over the pool's slots per node),
// rounded up. InvalidArgument saying why when the pool cannot host it (GPU
// kind, more ranks per node than slots, more nodes than max_nodes).
absl::StatusOr<int32_t> AllocationNodes(const SlurmPoolConfig& pool,
                                        const WaitingJob& job);

// "waiting for Slurm allocation 1234 (PD: Resources)"; the reason is left
// out when Slurm gives none ("None").
std::string SlurmWaitReason(const SlurmAllocation& allocation, int32_t registered);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_H_
