// Collectives among GPU ranks over NCCL, on raw device pointers and CUDA
// streams (no LibTorch). Every CUDA and NCCL call goes through GpuApi
// (gpu_api.h): the real libraries where they are built (TESSERA_HAVE_NCCL,
// NCCL 2.14 or newer: configure refuses older), a fake in the CPU tests.
// nccl_tensor_communicator.h adapts it to the Communicator interface for CUDA
// tensors when LibTorch itself has CUDA.
//
// Bootstrap: rank 0 calls NewNcclUniqueId and hands the 128 bytes to the other
// ranks (the coordinator's Rendezvous bootstrap with backend "nccl", or a key in
// the static TCPStore); every rank then calls NcclComm::Create with them, which
// blocks until all ranks have joined. The communicator is non-blocking
// (ncclConfig_t.blocking = 0): joining, and any enqueue that NCCL reports as
// still in progress, is polled with NcclOptions::timeout as its deadline, so a
// peer that never joins yields a status instead of a hang. An enqueue that
// misses its deadline aborts the communicator: a half-enqueued collective
// leaves it unusable.
//
// Streams: every collective (all-reduce, broadcast, barrier) is ordered after
// the work already queued on the caller's stream (a `ready` event joins the
// two) and runs on the communicator's own stream, so the caller's stream goes
// on computing while it runs (gradient buckets overlap backward this way).
// NcclPending::WaitOn makes a stream wait for the result without blocking the
// host; Synchronize blocks the host until the collective finished or the
// communicator was aborted. Until its `ready` event completes a collective
// waits on this rank's own kernels (PendingCollectiveInfo::ready is false);
// after, on its peers.
//
// The collective timeout (collective_timeout.h): a thread per communicator polls
// ncclCommGetAsyncError, the collectives' events and the age of the oldest
// unfinished collective (until its `done` event completes). On an error, or
// once one has been pending for NcclOptions::timeout, it aborts the
// communicator (ncclCommAbort) and reports:
//   * a CUDA error that is not NCCL's (an event query failing with a sticky
//     error such as cudaErrorIllegalAddress from a model kernel: the device
//     context is unusable) through on_device_failure, naming the error;
//   * anything else (an NCCL error, a timeout) through on_collective_failure,
//     naming the collective and bucket.
// Destruction runs ncclCommFinalize and ncclCommDestroy only when nothing is
// pending and NCCL reports no error, and gives finalizing at most
// NcclOptions::finalize_timeout; otherwise, and after Abort, the communicator
// is aborted instead, since an orderly teardown could wait on a peer that is
// gone.
//
// Thread-safety: issue collectives from one thread at a time, in the same order
// on every rank (NCCL's rule). Abort and collectives() may be called from any
// thread. Errors come back as a status.
#ifndef TESSERA_WORKER_TRAINER_DIST_NCCL_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_DIST_NCCL_COMMUNICATOR_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/pending_collective_tracker.h"
#include "worker/trainer/gpu/gpu_api.h"

namespace tessera::trainer {

class CollectiveTimeout;

// A fresh NCCL unique id (rank 0 only), as kNcclUniqueIdBytes raw bytes.
absl::StatusOr<std::string> NewNcclUniqueId(GpuApi& api);

// Number of CUDA devices this process can see (0 when there is no driver or
// device; never an error).
int VisibleCudaDevices(GpuApi& api);

// NCCL's version in NCCL's integer form (NCCL_VERSION_CODE: 22203 is 2.22.3):
// the library loaded at run time (ncclGetVersion) and the nccl.h this was
// compiled against. A loaded NCCL older than the headers may lack what they
// declare.
struct NcclVersions {
  int loaded = 0;
  int compiled = 0;
};
// `compiled` is 0 from this form: only the real library's knows its header.
absl::StatusOr<NcclVersions> GetNcclVersions(GpuApi& api);

// The three above through the real libraries (CudaNcclApi; defined only where
// they are built); GetNcclVersions() fills `compiled` from nccl.h.
absl::StatusOr<std::string> NewNcclUniqueId();
int VisibleCudaDevices();
absl::StatusOr<NcclVersions> GetNcclVersions();

// "2.22.3" for 22203; also NCCL's pre-2.9 form (2708 is 2.7.8).
std::string FormatNcclVersion(int code);

struct NcclOptions {
  // Limit for joining the communicator and for each collective: the collective timeout
  // aborts the communicator once one has been pending this long
  // (--collective-timeout).
  absl::Duration timeout = absl::Minutes(5);
  // Time between two checks of the collective timeout.
  absl::Duration timeout_poll_interval = absl::Milliseconds(100);
  // The longest a clean teardown waits for ncclCommFinalize before it aborts
  // (a peer that died after the last collective never finalizes).
  absl::Duration finalize_timeout = absl::Seconds(10);
  // Called once, on the collective timeout's thread, after it aborted the communicator,
  // with the reason; tessera-train exits there (ExitOnCollectiveFailure).
  // Unset: pending and later collectives fail with the reason.
  std::function<void(const std::string& reason)> on_collective_failure;
  // Called instead of on_collective_failure when what the collective timeout found is a
  // CUDA error outside NCCL (the reason names it); tessera-train exits with
  // kTrainerExitCudaError there (ExitOnCudaError). Unset: on_collective_failure.
  std::function<void(const std::string& reason)> on_device_failure;
};

// One launched collective. Destroying it does not cancel or wait for it.
class NcclPending {
 public:
  virtual ~NcclPending() = default;
  // Work queued on `stream` after this call sees the collective's result.
  virtual absl::Status WaitOn(GpuStream stream) = 0;
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
  // every rank has joined; DeadlineExceeded (the communicator aborted) when
  // they have not within options.timeout. Through the real libraries
  // (CudaNcclApi; defined only where they are built).
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(
      const std::string& unique_id, int rank, int world_size, int device,
      const NcclOptions& options = {});
  // The same through `api`, which must outlive the communicator.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(
      GpuApi& api, const std::string& unique_id, int rank, int world_size, int device,
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
  // `bucket`: the gradient bucket it carries, to name it (kNoBucket: none).
  absl::StatusOr<std::unique_ptr<NcclPending>> AllReduceSumAsync(void* buffer,
                                                                 size_t count,
                                                                 NcclDataType type,
                                                                 GpuStream stream,
                                                                 int bucket = kNoBucket);

  // In place over `count_per_rank` x world size elements at `buffer`, after
  // the work queued on `stream`, like AllReduceSumAsync: ReduceScatterSumAsync
  // leaves this rank's part (elements rank x count_per_rank ...) holding the
  // part's sum over the ranks; AllGatherAsync copies every rank's part from
  // its owner into every rank's buffer.
  absl::StatusOr<std::unique_ptr<NcclPending>> ReduceScatterSumAsync(
      void* buffer, size_t count_per_rank, NcclDataType type, GpuStream stream,
      int bucket = kNoBucket);
  absl::StatusOr<std::unique_ptr<NcclPending>> AllGatherAsync(void* buffer,
                                                              size_t count_per_rank,
                                                              NcclDataType type,
                                                              GpuStream stream,
                                                              int bucket = kNoBucket);

  // AllReduceSumAsync, then `stream` waits for it (the host does not).
  absl::Status AllReduceSum(void* buffer, size_t count, NcclDataType type,
                            GpuStream stream);

  // Copies rank `root`'s `count` elements at `buffer` into every rank's `buffer`,
  // after the work queued on `stream`, on the communicator's stream; `stream`
  // waits for it (the host does not).
  absl::Status Broadcast(void* buffer, size_t count, NcclDataType type, int root,
                         GpuStream stream);

  // Returns once every rank has reached the barrier (host-blocking).
  absl::Status Barrier();

  // Aborts the communicator (ncclCommAbort) for an exit that is not clean:
  // pending and later collectives fail.
  void Abort();

  // The collectives issued whose `done` event has not completed yet (as the
  // collective timeout last saw them).
  const PendingCollectiveTracker& collectives() const;

  // Why the communicator was aborted; nullopt if it was not.
  std::optional<std::string> abort_reason() const;

 private:
  // Starts the collective timeout.
  NcclComm(int rank, int world_size, int device, std::shared_ptr<NcclCommState> state);

  const int rank_;
  const int world_size_;
  const int device_;
  std::shared_ptr<NcclCommState> state_;
  // Last: polls state_, and is stopped and joined first.
  std::unique_ptr<CollectiveTimeout> collective_timeout_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_NCCL_COMMUNICATOR_H_
