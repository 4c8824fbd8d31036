#include "coordinator/core/slurm/slurm_script.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace tessera {

namespace {

bool IsPlainLine(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string FormatSlurmTime(absl::Duration d) {
  int64_t seconds = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(d)));
  if (seconds < 0) seconds = 0;
  return absl::StrFormat("%d-%02d:%02d:%02d", seconds / 86400, seconds / 3600 % 24,
                         seconds / 60 % 60, seconds % 60);
}

absl::StatusOr<std::string> RenderSbatchScript(const SlurmPoolConfig& pool,
                                               const SlurmAllocationRequest& request) {
  RETURN_IF_ERROR(ValidateSlurmPool(pool));
  if (request.nodes < 1 || request.nodes > pool.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("allocation of ", request.nodes,
                                                   " nodes; pool ", pool.name,
                                                   " allows 1 to ", pool.max_nodes));
  }
  if (request.coordinator_address.empty() || !IsPlainLine(request.coordinator_address)) {
    return absl::InvalidArgumentError("coordinator address must be one line, not empty");
  }
  if (request.join_token_file.empty() || request.join_token_file[0] != '/' ||
      !IsPlainLine(request.join_token_file)) {
    return absl::InvalidArgumentError("join token file must be an absolute path");
  }

  std::vector<std::string> s = {
      "#!/bin/bash",
      absl::StrCat("#SBATCH --job-name=tessera-", pool.name, "-job", request.job_id),
      absl::StrCat("#SBATCH --nodes=", request.nodes),
      "#SBATCH --ntasks-per-node=1",
      absl::StrCat("#SBATCH --cpus-per-task=", pool.cpus_per_node),
  };
  if (pool.gpus_per_node > 0) {
    s.push_back(absl::StrCat("#SBATCH --gpus-per-node=", pool.gpus_per_node));
  }
  s.push_back(absl::StrCat("#SBATCH --time=", FormatSlurmTime(pool.time_limit)));
  s.push_back("#SBATCH --no-requeue");
  if (!pool.signal.empty()) s.push_back("#SBATCH --signal=" + pool.signal);
  s.push_back("#SBATCH --output=" + pool.output);
  if (!pool.partition.empty()) s.push_back("#SBATCH --partition=" + pool.partition);
  if (!pool.account.empty()) s.push_back("#SBATCH --account=" + pool.account);
  if (!pool.qos.empty()) s.push_back("#SBATCH --qos=" + pool.qos);
  for (const std::string& o : pool.sbatch_options) s.push_back("#SBATCH " + o);

  absl::StrAppend(&s.emplace_back(), "# Written by tessera-coordinator for job ",
                  request.job_id, " in Slurm pool ", pool.name, ".");
  s.push_back("# One tessera-worker per node; they register with the coordinator under");
  s.push_back("# the pool's label and drain on SIGUSR1. The join credential is read");
  s.push_back("# from --join-token-file: it is in neither this script nor any argv.");
  // $SLURM_JOB_ID is the same on every node and expands here; the worker's
  // name must differ per node, so it is expanded in each task by bash -c.
  const std::string node_dir = ShellQuote(pool.node_dir);
  std::vector<std::string> worker = {
      "exec srun --ntasks-per-node=1",
      absl::StrCat("--cpus-per-task=", pool.cpus_per_node),
      "--kill-on-bad-exit=0",
      "/bin/bash -c 'exec \"$@\" --name \"$(hostname -s)-slurm-${SLURM_JOB_ID}\"'",
      "tessera-worker",
      ShellQuote(pool.worker_path),
      "--coordinator " + ShellQuote(request.coordinator_address),
      "--pool " + ShellQuote(pool.name),
      "--slurm-job-id \"${SLURM_JOB_ID}\"",
      "--join-token-file " + ShellQuote(request.join_token_file),
  };
  if (pool.gpus_per_node > 0) {
    worker.push_back(absl::StrCat("--gpus ", pool.gpus_per_node));
  } else {
    worker.push_back(absl::StrCat("--cpu-slots ", pool.cpus_per_node, " --gpus none"));
  }
  worker.push_back("--work-dir " + node_dir + "\"/tessera-slurm-${SLURM_JOB_ID}-work\"");
  worker.push_back("--state-dir " + node_dir +
                   "\"/tessera-slurm-${SLURM_JOB_ID}-state\"");
  for (const std::string& a : pool.worker_args) worker.push_back(ShellQuote(a));
  s.push_back(absl::StrJoin(worker, " \\\n  "));
  return absl::StrJoin(s, "\n") + "\n";
}

}  // namespace tessera
