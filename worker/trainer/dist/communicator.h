// Collective operations among the ranks of one job attempt, as the training loop
// needs them: in-place sum all-reduce (blocking, or launched and waited for later
// so gradient buckets overlap backward), in-place reduce-scatter and all-gather
// over ZeRO's shards (bucket_plan.h's ShardOf), broadcast from a root, barrier.
//
// Backends implement this interface: LocalCommunicator (below) for a single
// process, GlooCommunicator (gloo_communicator.h) over TCP for CPU tensors, and
// NcclCommunicator (nccl_tensor_communicator.h) for CUDA tensors. The header
// names at::Tensor without including LibTorch, so it stays cheap to include.
//
// The Gloo and NCCL backends track their unfinished collectives
// (pending_collective_tracker.h) and run a collective timeout over them
// (collective_timeout.h): a collective pending past the timeout, or a broken
// communicator, aborts the communicator and fails with a reason that names the
// collective, e.g. "allreduce #412 (bucket 3)".
//
// Thread-safety: collectives must be issued by every rank in the same order, from
// one thread at a time per communicator (a launched collective may be waited for
// from another thread). Errors (a peer gone, a timeout) come back as a status; no
// exception escapes. Abort() and collectives() may be called from any thread.
#ifndef TESSERA_WORKER_TRAINER_DIST_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_DIST_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace at {
class Tensor;
}  // namespace at

namespace tessera::trainer {

// A launched collective. Wait returns its status once the result is in place:
// for host memory, when the data is there; for device memory, when work the
// caller queues afterwards on its stream will see it. Destroying a PendingCollective
// without waiting does not cancel the collective; its tensor must stay alive
// until it finishes.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual absl::Status Wait() = 0;
};

// A collective that already finished with `status` (a world of one, or a launch
// that failed).
std::unique_ptr<PendingCollective> FinishedCollective(absl::Status status);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;

  // Starts replacing `tensor` on every rank with the element-wise sum over all
  // ranks and returns without waiting. The tensor must be dense and contiguous,
  // with the same shape and dtype on every rank (float32, float64 or int64; the
  // NCCL backend also takes float16 and bfloat16), and must stay alive and
  // untouched until the returned collective has been waited for. Launch errors
  // come back from Wait. `bucket`: the gradient bucket the tensor holds, so that
  // a collective that never finishes can be named (kNoBucket: none).
  std::unique_ptr<PendingCollective> AllReduceSumAsync(at::Tensor& tensor,
                                                       int bucket = kNoBucket) {
    return StartAllReduceSum(tensor, bucket);
  }

  // AllReduceSumAsync, then Wait.
  virtual absl::Status AllReduceSum(at::Tensor& tensor);

  // Starts the in-place reduce-scatter of `buffer` (dense, contiguous, 1-D,
  // of the same element count n and dtype on every rank): once waited for,
  // this rank's shard of it, ShardOf(n, world size, rank), holds that range's
  // element-wise sum over the ranks; the rest of the buffer is left undefined.
  // n need not divide by the world size (a backend that needs equal parts
  // pads inside). Each rank sends (N-1)/N of the buffer. Lifetime and naming
  // as AllReduceSumAsync.
  std::unique_ptr<PendingCollective> ReduceScatterSumAsync(at::Tensor& buffer,
                                                           int bucket = kNoBucket) {
    return StartReduceScatterSum(buffer, bucket);
  }
  absl::Status ReduceScatterSum(at::Tensor& buffer);

  // Starts the in-place all-gather of `buffer` (as above): each rank's shard,
  // ShardOf(n, world size, rank), is copied from that rank into every other
  // rank's buffer. Each rank sends (N-1)/N of the buffer.
  std::unique_ptr<PendingCollective> AllGatherAsync(at::Tensor& buffer,
                                                    int bucket = kNoBucket) {
    return StartAllGather(buffer, bucket);
  }
  absl::Status AllGather(at::Tensor& buffer);

  // Bytes this rank has sent to its peers through its collectives so far, as
  // the backend counts what it hands to the transport (for benchmarks).
  virtual int64_t bytes_sent() const { return 0; }

  // Copies `tensor` from rank `root` into `tensor` on every other rank.
  virtual absl::Status Broadcast(at::Tensor& tensor, int root) = 0;

  // Returns once every rank has called Barrier.
  virtual absl::Status Barrier() = 0;

  // Tears the communicator down without waiting for the peers, for an exit that
  // is not clean: collectives pending or issued later fail, and destroying it
  // then skips the orderly teardown (NCCL: ncclCommAbort instead of
  // ncclCommDestroy), which could wait on a peer that is gone.
  virtual void Abort() {}

  // The collectives issued and not finished yet; null where none can be
  // pending (a world of one).
  virtual const PendingCollectiveTracker* collectives() const { return nullptr; }

 protected:
  // The implementations of AllReduceSumAsync, ReduceScatterSumAsync and
  // AllGatherAsync.
  virtual std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor& tensor,
                                                               int bucket) = 0;
  virtual std::unique_ptr<PendingCollective> StartReduceScatterSum(at::Tensor& buffer,
                                                                   int bucket) = 0;
  virtual std::unique_ptr<PendingCollective> StartAllGather(at::Tensor& buffer,
                                                            int bucket) = 0;
};

// The world of one: every collective leaves the data as it is.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }
  absl::Status Broadcast(at::Tensor& tensor, int root) override;
  absl::Status Barrier() override;

 private:
  std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor& tensor,
                                                       int bucket) override;
  std::unique_ptr<PendingCollective> StartReduceScatterSum(at::Tensor& buffer,
                                                           int bucket) override;
  std::unique_ptr<PendingCollective> StartAllGather(at::Tensor& buffer,
                                                    int bucket) override;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_COMMUNICATOR_H_
