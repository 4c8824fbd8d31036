// SlurmClient: what the coordinator needs from a Slurm cluster, as a small
// interface: submit a batch script, ask for the state of some jobs, cancel or
// signal a job.
//
// The real implementation (coordinator/slurm/slurm_command_client.h) runs sbatch,
// squeue and scancel; core code sees only this interface, so that the pool
// logic (slurm_pool.h) is tested with a fake and core holds no process code.
//
// Slurm job ids are kept as text, as Slurm prints them ("1234"); the
// proto's Worker.slurm_job_id is text too.
//
// Thread-safety: implementations must be safe to call from several threads.
// Every call may block for as long as the command takes (bounded by the
// implementation's timeout); never call one under a lock.
#ifndef TESSERA_COORDINATOR_CORE_SLURM_SLURM_CLIENT_H_
#define TESSERA_COORDINATOR_CORE_SLURM_SLURM_CLIENT_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

struct SbatchRequest {
  // The whole batch script ("#!/bin/bash" and "#SBATCH" lines), given to
  // sbatch on its standard input (slurm_script.h renders it).
  std::string script;
  // Unix account to submit as: the job runs as this user and is charged to
  // it. Empty: the coordinator's own (service) account. An implementation
  // that cannot switch accounts fails with PermissionDenied.
  std::string run_as;
  // Directory sbatch runs in (the job's default working directory and where
  // relative paths in the script resolve). Empty: "/".
  std::string working_dir;
};

// One job as squeue shows it.
struct SlurmJobInfo {
  std::string id;
  // Compact state code: "PD" pending, "CF" configuring, "R" running, "CG"
  // completing, "CD" completed, "F" failed, "CA" cancelled, "TO" timeout,
  // "PR" preempted, "NF" node fail, "OOM", ... (squeue --states=all, %t).
  std::string state;
  // Why it is in that state, e.g. "Resources", "Priority",
  // "QOSMaxJobsPerUserLimit", or "None" (squeue %r).
  std::string reason;
  std::string nodes;  // the node list once allocated (squeue %N), else empty
};

class SlurmClient {
 public:
  virtual ~SlurmClient() = default;

  // Submits a batch job and returns its Slurm job id ("1234"). Errors say
  // what sbatch said (e.g. "Invalid account or account/partition combination").
  virtual absl::StatusOr<std::string> Submit(const SbatchRequest& request) = 0;

  // The state of each of `ids` that Slurm still knows, by id. A job that is
  // absent has ended and been purged from slurmctld's memory (MinJobAge): for
  // the caller it has ended. Finished jobs still in memory are returned with
  // their final state ("CD", "CA", ...).
  virtual absl::StatusOr<std::map<std::string, SlurmJobInfo>> Query(
      const std::vector<std::string>& ids) = 0;

  // Without `signal`: cancels the job (Slurm sends SIGTERM to its steps, then
  // SIGKILL after KillWait). With `signal` (e.g. "USR1"): sends that signal
  // to the job's steps and leaves the job running. Cancelling a job that has
  // already ended is not an error.
  virtual absl::Status Cancel(const std::string& id,
                              std::optional<std::string> signal = std::nullopt) = 0;
};

// True for the states of a job that has ended for good: "CD", "F", "CA",
// "TO", "PR", "NF", "OOM", "BF", "DL", "RV", "SE".
bool IsSlurmStateFinal(std::string_view state);

// True for the states of a job that holds no nodes and waits to be scheduled:
// "PD", and the held or requeued states "RH", "RQ", "RF", "RD".
bool IsSlurmStatePending(std::string_view state);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SLURM_SLURM_CLIENT_H_
