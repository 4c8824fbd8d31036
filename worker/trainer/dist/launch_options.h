// LaunchOptions: where one tessera-train process sits in its job (coordinator
// address, job, attempt, rank, world size, credential, collective timeout).
// Set by the worker on the command line; main.cc fills it from flags and
// run/trainer_options.h validates it. Below the process group that reads it.
#ifndef TESSERA_WORKER_TRAINER_DIST_LAUNCH_OPTIONS_H_
#define TESSERA_WORKER_TRAINER_DIST_LAUNCH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace tessera::trainer {

// Where this process sits in the job. Set by the worker on the command line.
struct LaunchOptions {
  // "host:port" of the coordinator. Empty: no coordinator; then either a
  // standalone run (world size 1) or a static rendezvous via rendezvous_store.
  std::string coordinator;
  // "host:port" of a c10d TCPStore for a run without a coordinator: rank 0 hosts
  // the store on that port and every rank connects to it (for benchmarks and
  // machines without the control plane). Ignored when coordinator is set.
  std::string rendezvous_store;
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;    // rank within this machine
  std::string metrics_file;  // JSON lines of every metric point; empty: none
  // File holding this rank's coordinator credential (0600, written by the
  // worker); it is read once at start and removed. Empty: none.
  std::string credential_file;
  std::string credential;  // its contents, filled by the trainer's main
  // How long forming the group and each collective may take before the rank
  // aborts its communicator and exits with kTrainerExitCollectiveFailure
  // (collective_timeout.h). Longer than the coordinator's stall threshold
  // (60 s by default), so that the coordinator, which sees every rank and can
  // name the one that stopped, acts first.
  absl::Duration collective_timeout = absl::Minutes(5);
  // Where a step profile (profile_steps) writes trace.json and summary.json;
  // empty: the current folder. The worker sets it to rank-N.profile beside
  // the rank's log.
  std::string profile_dir;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_LAUNCH_OPTIONS_H_
