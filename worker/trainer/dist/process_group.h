// Forms the group of ranks that train one job attempt together and returns the
// Communicator they share.
//
// Three ways in:
//   * coordinator: rank 0 hosts a RendezvousStore on port 0 at the local address it uses
//     to reach the coordinator and sends "ip:port" as its Rendezvous bootstrap;
//     every rank receives rank, world size and that bootstrap once all have
//     joined, connects to the store and joins the Gloo group. With the "nccl"
//     backend rank 0 sends the 128-byte NCCL unique id as the bootstrap instead
//     and every rank joins the NCCL communicator on its CUDA device.
//   * static store (--rendezvous-store, no coordinator): rank 0 hosts the store at
//     the given port; the others connect to it. For benchmarks and machines
//     without the control plane. With "nccl", rank 0 publishes the NCCL id in the
//     store.
//   * neither: a standalone run of world size 1 (LocalCommunicator).
// A world of one never opens sockets beyond the coordinator call. The "nccl"
// backend exists only in builds whose LibTorch has CUDA and where NCCL was found
// (TESSERA_NCCL_TENSORS); elsewhere asking for it fails with FailedPrecondition.
//
// Thread-compatible free function; blocks until the group is formed.
#ifndef TESSERA_WORKER_TRAINER_DIST_PROCESS_GROUP_H_
#define TESSERA_WORKER_TRAINER_DIST_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/launch_options.h"
#include "worker/trainer/dist/rendezvous_client.h"

namespace tessera::trainer {

struct ProcessGroupOptions {
  // --collective-timeout: the limit for connecting to the store and forming the
  // group (Gloo mesh, NCCL init), and each collective's: a collective pending
  // this long fires the communicator's collective timeout (collective_timeout.h).
  absl::Duration timeout = absl::Minutes(5);
  // Called once, on the collective timeout's thread, after the communicator was aborted
  // (a collective timed out, or NCCL reported an error), with the reason;
  // tessera-train exits there (ExitOnCollectiveFailure).
  std::function<void(const std::string& reason)> on_collective_failure;
  // The NCCL backend's collective timeout found a CUDA error outside NCCL instead
  // (NcclOptions::on_device_failure); tessera-train exits there
  // (ExitOnCudaError). Unset: on_collective_failure.
  std::function<void(const std::string& reason)> on_device_failure;
  int gloo_threads = 2;  // Gloo worker threads
  // Two ranks all-reduce by one pairwise exchange (GlooOptions::pairwise_exchange).
  bool gloo_pairwise_exchange = true;
  // "gloo" (CPU tensors) or "nccl" (CUDA tensors on cuda_device).
  std::string backend = "gloo";
  int cuda_device = 0;  // the NCCL backend's device
};

// Whether this build can form an NCCL group (LibTorch with CUDA, NCCL found).
bool NcclBackendAvailable();

// Whether this build can form a Gloo group of several ranks (LibTorch's and
// Gloo's headers found at build time; pip's LibTorch ships none of Gloo's).
bool GlooBackendAvailable();

struct ProcessGroup {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  std::unique_ptr<Communicator> communicator;
};

// `coordinator` must be non-null exactly when launch.coordinator is set. Fails
// with FailedPrecondition when the coordinator's answer contradicts the launch
// flags (another rank or world size), and with the store's or Gloo's status when
// the group cannot be formed.
absl::StatusOr<ProcessGroup> JoinProcessGroup(const LaunchOptions& launch,
                                              RendezvousClient* coordinator,
                                              const ProcessGroupOptions& options = {});

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_PROCESS_GROUP_H_
