// Collective operations among the ranks of one job attempt, as the training loop
// needs them: in-place sum all-reduce, broadcast from a root, barrier.
//
// Backends implement this interface: LocalCommunicator (below) for a single
// process, GlooCommunicator (gloo_communicator.h) over TCP, later NCCL on GPUs.
// The header names at::Tensor without including LibTorch, so it stays cheap to
// include.
//
// Thread-safety: collectives must be issued by every rank in the same order, from
// one thread at a time per communicator. Errors (a peer gone, a timeout) come back
// as a status; no exception escapes.
#ifndef TESSERA_WORKER_TRAINER_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_COMMUNICATOR_H_

#include <string>

#include "absl/status/status.h"

namespace at {
class Tensor;
}  // namespace at

namespace tessera::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;

  // Replaces `tensor` on every rank with the element-wise sum over all ranks. The
  // tensor must be dense and contiguous, with the same shape and dtype (float32,
  // float64 or int64) on every rank. Blocks until the result is in place.
  virtual absl::Status AllReduceSum(at::Tensor& tensor) = 0;

  // Copies `tensor` from rank `root` into `tensor` on every other rank.
  virtual absl::Status Broadcast(at::Tensor& tensor, int root) = 0;

  // Returns once every rank has called Barrier.
  virtual absl::Status Barrier() = 0;
};

// The world of one: every collective leaves the data as it is.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }
  absl::Status AllReduceSum(at::Tensor& tensor) override;
  absl::Status Broadcast(at::Tensor& tensor, int root) override;
  absl::Status Barrier() override;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_COMMUNICATOR_H_
