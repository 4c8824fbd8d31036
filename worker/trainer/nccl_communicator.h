// Collectives among GPU ranks over NCCL, on raw device pointers and CUDA
// streams (no LibTorch, so it builds wherever nccl.h and the CUDA runtime are
// found; TESSERA_HAVE_NCCL). nccl_tensor_communicator.h adapts it to the
// Communicator interface for CUDA tensors when LibTorch itself has CUDA.
//
// Bootstrap: rank 0 calls NewNcclUniqueId and hands the 128 bytes to the other
// ranks (the coordinator's Rendezvous bootstrap with backend "nccl", or a key in
// the static TCPStore); every rank then calls NcclComm::Create with them, which
// blocks until all ranks have joined.
//
// Streams: a collective is ordered after the work already queued on the
// caller's stream (an event joins the two) and runs on the communicator's own
// stream, so the caller's stream goes on computing while it runs (gradient
// buckets overlap backward this way). NcclPending::WaitOn makes a stream wait
// for the result without blocking the host; Synchronize blocks the host, polling
// NCCL for asynchronous errors, and aborts the communicator on error or timeout
// so a dead peer yields a status instead of a hang.
//
// Thread-safety: issue collectives from one thread at a time, in the same order
// on every rank (NCCL's rule). Errors come back as a status.
#ifndef TESSERA_WORKER_TRAINER_NCCL_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::trainer {

// Element types the NCCL backend reduces.
enum class NcclDataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64 };

// Size of an NCCL unique id (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// A fresh NCCL unique id (rank 0 only), as kNcclUniqueIdBytes raw bytes.
absl::StatusOr<std::string> NewNcclUniqueId();

// Number of CUDA devices this process can see (0 when there is no driver or
// device; never an error).
int VisibleCudaDevices();

struct NcclOptions {
  // Limit for host-side waits (Synchronize, Barrier) before the communicator is
  // aborted.
  absl::Duration timeout = absl::Minutes(5);
};

// One launched collective. Destroying it does not cancel or wait for it.
class NcclPending {
 public:
  virtual ~NcclPending() = default;
  // Work queued on `stream` after this call sees the collective's result.
  virtual absl::Status WaitOn(cudaStream_t stream) = 0;
  // Blocks until the collective has finished on the device.
  virtual absl::Status Synchronize() = 0;
};

// NCCL and CUDA handles; defined in the .cc. Shared by a communicator and its
// pending operations, which poll it for asynchronous errors.
struct NcclCommState;

class NcclComm {
 public:
  // Joins the communicator of `world_size` ranks identified by `unique_id` (from
  // NewNcclUniqueId on rank 0) as `rank`, on CUDA device `device`. Blocks until
  // every rank has joined.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(
      const std::string& unique_id, int rank, int world_size, int device,
      const NcclOptions& options = {});

  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }

  // Sums `count` elements at device pointer `buffer` over all ranks, in place,
  // after the work queued on `stream` so far. `buffer` must stay allocated until
  // the collective has finished (WaitOn then stream order, or Synchronize).
  absl::StatusOr<std::unique_ptr<NcclPending>> AllReduceSumAsync(void* buffer,
                                                                 size_t count,
                                                                 NcclDataType type,
                                                                 cudaStream_t stream);

  // AllReduceSumAsync, then `stream` waits for it (the host does not).
  absl::Status AllReduceSum(void* buffer, size_t count, NcclDataType type,
                            cudaStream_t stream);

  // Copies rank `root`'s `count` elements at `buffer` into every rank's `buffer`;
  // `stream` waits for it (the host does not).
  absl::Status Broadcast(void* buffer, size_t count, NcclDataType type, int root,
                         cudaStream_t stream);

  // Returns once every rank has reached the barrier (host-blocking).
  absl::Status Barrier();

 private:
  NcclComm(int rank, int world_size, int device, std::shared_ptr<NcclCommState> state);

  const int rank_;
  const int world_size_;
  const int device_;
  std::shared_ptr<NcclCommState> state_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_NCCL_COMMUNICATOR_H_
