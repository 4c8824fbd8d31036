// The Communicator (communicator.h) for CUDA tensors: the glue from LibTorch
// tensors and its current CUDA stream to the raw-pointer NCCL backend
// (nccl_communicator.h).
//
// Built only when LibTorch has CUDA and NCCL is found (TESSERA_NCCL_TENSORS);
// Debian's CPU-only LibTorch leaves it out while nccl_communicator still builds.
// Reduce-scatter and all-gather are NCCL's, in place; a buffer that does not
// divide into world size equal parts goes through a zero-padded copy.
// Collectives are stream-ordered: AllReduceSumAsync starts after the work queued
// so far on the tensor device's current stream, and Wait makes the then-current
// stream wait for the result without blocking the host (a later .item() or copy
// to the CPU sees it). The NcclComm's collective timeout tracks every collective until
// its done event completes and aborts the communicator on an NCCL error or
// timeout (nccl_communicator.h).
//
// Thread-safety: as Communicator.
#ifndef TESSERA_WORKER_TRAINER_DIST_NCCL_TENSOR_COMMUNICATOR_H_
#define TESSERA_WORKER_TRAINER_DIST_NCCL_TENSOR_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/nccl_communicator.h"

namespace tessera::trainer {

class NcclCommunicator final : public Communicator {
 public:
  // Takes over `comm`, which must be non-null.
  explicit NcclCommunicator(std::unique_ptr<NcclComm> comm);

  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->world_size(); }
  std::string backend() const override { return "nccl"; }
  absl::Status Broadcast(at::Tensor& tensor, int root) override;
  absl::Status Barrier() override;
  void Abort() override;
  const PendingCollectiveTracker* collectives() const override;

 private:
  // `tensor` must live on the communicator's CUDA device.
  std::unique_ptr<PendingCollective> StartAllReduceSum(at::Tensor& tensor,
                                                       int bucket) override;
  std::unique_ptr<PendingCollective> StartReduceScatterSum(at::Tensor& buffer,
                                                           int bucket) override;
  std::unique_ptr<PendingCollective> StartAllGather(at::Tensor& buffer,
                                                    int bucket) override;
  std::unique_ptr<PendingCollective> StartSharded(at::Tensor& buffer, int bucket,
                                                  bool reduce_scatter);

  const std::unique_ptr<NcclComm> comm_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_NCCL_TENSOR_COMMUNICATOR_H_
