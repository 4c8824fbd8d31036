// The batch script the coordinator submits for a Slurm pool allocation.
//
// One allocation = one sbatch job of `nodes` nodes with one task per node;
// the script's only command is an srun that starts one tessera-worker per
// node. Each worker gets the coordinator's address, the pool's label
// (--pool), the allocation's id (--slurm-job-id "$SLURM_JOB_ID"), a name
// unique to its node and allocation ("<short hostname>-slurm-<id>"), its
// slots (--cpu-slots for a CPU pool, --gpus for a GPU pool), node-local work
// and state directories under the pool's node_dir, and the join credential
// as a file path (--join-token-file): the credential itself is in neither
// the script (which Slurm stores and `scontrol write batch_script` shows)
// nor any argv (which every user of a node can read in /proc).
//
// Always in the script: --no-requeue (the coordinator restarts jobs itself,
// from their checkpoints, and must not find a requeued allocation it did
// not ask for) and, unless the pool turns it off, --signal=USR1@120: Slurm
// signals the workers before the time limit or a preemption, and they drain.
//
// Every pool value was checked by the pool parser to be one line of plain
// characters; argv values are single-quoted for bash.
//
// Thread-safety: free functions.
#ifndef TESSERA_COORDINATOR_CORE_SLURM_SLURM_SCRIPT_H_
#define TESSERA_COORDINATOR_CORE_SLURM_SLURM_SCRIPT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/core/slurm/slurm_pool_config.h"

namespace tessera {

struct SlurmAllocationRequest {
  int64_t job_id = 0;  // the tessera job the allocation is for (in its Slurm job name)
  int32_t nodes = 1;   // nodes to allocate, one worker each
  // HOST:PORT of the coordinator's gRPC listener, reachable from the nodes.
  std::string coordinator_address;
  // Absolute path, readable from the nodes by the account the job runs as
  // and by no one else (0600), of the file holding the join credential.
  std::string join_token_file;
};

// The whole script, for SbatchRequest::script. InvalidArgument when the
// request has a bad value (a path that is not absolute, a multi-line value).
absl::StatusOr<std::string> RenderSbatchScript(const SlurmPoolConfig& pool,
                                               const SlurmAllocationRequest& request);

// Slurm's --time form of a duration, rounded up to whole seconds:
// "0-01:00:00", "2-00:30:00".
std::string FormatSlurmTime(absl::Duration d);

// `s` as one bash word in single quotes ("it's" -> 'it'\''s').
std::string ShellQuote(const std::string& s);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SLURM_SLURM_SCRIPT_H_
