// Slurm worker pools: their configuration and its YAML file format.
//
// The coordinator reads one YAML file (--slurm-pools FILE) naming one or more
// pools. A pool says where and how to ask Slurm for nodes (partition,
// account, QoS, CPUs or GPUs per node, time limit, extra sbatch options),
// how tessera-worker is started inside an allocation, and when an idle
// allocation is given back. Example (docs/slurm.md explains every field):
//
//   pools:
//     - name: gpu
//       partition: a100
//       account: vision-lab
//       qos: normal
//       max_nodes: 4            # most nodes one allocation may have
//       cpus_per_node: 16
//       gpus_per_node: 4        # 0: a CPU pool (slots = cpus_per_node)
//       time_limit: 12h
//       idle_timeout: 5m
//       max_allocations: 2
//       submit_as: owner        # or: service
//       sbatch_options: ["--constraint=a100-80g", "--mem=0"]
//       worker:
//         path: /opt/tessera/bin/tessera-worker
//         args: ["--tls-ca", "/etc/tessera/ca.pem"]
//
// Parsing is strict, like job specs: unknown keys, wrong types, values out of
// range, and options the pool sets itself are refused with InvalidArgument
// naming the line and the field, e.g.
// "line 9: pools[0].idle_timeout: expected a duration such as 5m or 1h30m, got 'soon'".
// Every value that ends up in the batch script is checked to be one line of
// plain characters, so that a pool file cannot inject script lines.
//
// Thread-safety: plain values and free functions.
#ifndef TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_CONFIG_H_
#define TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {

inline constexpr int kMaxSlurmPools = 64;

struct SlurmPoolConfig {
  std::string name;       // the workers' --pool label; [a-z0-9][a-z0-9_-]*, at most 32
  std::string partition;  // --partition; empty: the cluster's default partition
  std::string account;    // --account; empty: the submitting user's default
  std::string qos;        // --qos; empty: the default
  int32_t max_nodes = 1;  // most nodes one allocation may have (one worker each)
  int32_t cpus_per_node = 1;  // --cpus-per-task of the one task per node; CPU pool slots
  int32_t gpus_per_node = 0;  // --gpus-per-node and the worker's --gpus; 0: a CPU pool
  absl::Duration time_limit = absl::Hours(1);  // --time
  // An allocation whose workers have all been idle this long is cancelled.
  absl::Duration idle_timeout = absl::Minutes(5);
  // A running allocation whose workers have not all registered within this
  // long is cancelled (a worker that cannot reach the coordinator, a bad path).
  absl::Duration register_timeout = absl::Minutes(5);
  // Allocations of this pool in flight at once (pending or running); 0: no limit.
  int32_t max_allocations = 4;
  // true: sbatch runs as the job's owner when the coordinator is root (Slurm
  // then runs and charges the job as that user); false, or a coordinator
  // that is not root: as the coordinator's service account.
  bool submit_as_owner = true;
  // --signal: Slurm's warning before the time limit or a preemption, which
  // makes the workers drain (checkpoint and leave). Empty: none.
  std::string signal = "USR1@120";
  // --output for the batch script and the workers' own logs (Slurm's
  // patterns such as %j and %u work). Default: discarded.
  std::string output = "/dev/null";
  std::vector<std::string> sbatch_options;  // more "--option=value" lines
  std::string worker_path = "/usr/local/bin/tessera-worker";
  std::vector<std::string> worker_args;  // more tessera-worker flags
  // Node-local directory under which each worker keeps its work and state
  // directories (tessera-slurm-<slurm job id>-work and -state).
  std::string node_dir = "/tmp";

  // Slots a worker of this pool offers: GPUs for a GPU pool, else CPUs.
  int32_t slots_per_node() const {
    return gpus_per_node > 0 ? gpus_per_node : cpus_per_node;
  }
};

// Parses and validates a pool file's text (see the header comment).
absl::StatusOr<std::vector<SlurmPoolConfig>> ParseSlurmPools(
    const std::string& yaml_text);

// Checks one pool as ParseSlurmPools does (for pools built in code).
absl::Status ValidateSlurmPool(const SlurmPoolConfig& pool);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SLURM_SLURM_POOL_CONFIG_H_
