#include "worker/trainer/dist/nccl_tensor_communicator.h"

#include <ATen/ATen.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/gpu/device.h"
#include "worker/trainer/gpu/gpu_api.h"

namespace tessera::trainer {
namespace {

GpuStream CurrentStream(int device) { return CurrentCudaStream(device); }

absl::StatusOr<NcclDataType> CheckTensor(const at::Tensor& tensor, int device) {
  if (!tensor.defined()) return absl::InvalidArgumentError("undefined tensor");
  if (!tensor.is_cuda() || tensor.device().index() != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL collectives here take tensors on cuda:", device, ", got ",
                     tensor.device().str()));
  }
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError("collective tensor must be contiguous");
  }
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return NcclDataType::kFloat32;
    case at::kDouble:
      return NcclDataType::kFloat64;
    case at::kHalf:
      return NcclDataType::kFloat16;
    case at::kBFloat16:
      return NcclDataType::kBFloat16;
    case at::kLong:
      return NcclDataType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported collective dtype ", c10::toString(tensor.scalar_type())));
  }
}

class PendingNccl final : public PendingCollective {
 public:
  PendingNccl(std::unique_ptr<NcclPending> pending, int device)
      : pending_(std::move(pending)), device_(device) {}

  absl::Status Wait() override { return pending_->WaitOn(CurrentStream(device_)); }

 private:
  const std::unique_ptr<NcclPending> pending_;
  const int device_;
};

// A reduce-scatter or all-gather over a copy padded to world size equal
// parts; Wait copies the result back on the then-current stream.
class PendingPadded final : public PendingCollective {
 public:
  PendingPadded(std::unique_ptr<PendingCollective> collective, at::Tensor padded,
                at::Tensor from, at::Tensor into)
      : collective_(std::move(collective)),
        padded_(std::move(padded)),
        from_(std::move(from)),
        into_(std::move(into)) {}

  absl::Status Wait() override {
    absl::Status status = collective_->Wait();
    if (status.ok() && padded_.defined()) into_.copy_(from_);
    padded_ = at::Tensor();
    return status;
  }

 private:
  const std::unique_ptr<PendingCollective> collective_;
  at::Tensor padded_;  // held until the result is copied out
  const at::Tensor from_;
  const at::Tensor into_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<NcclComm> comm)
    : comm_(std::move(comm)) {}

std::unique_ptr<PendingCollective> NcclCommunicator::StartAllReduceSum(at::Tensor& tensor,
                                                                       int bucket) {
  absl::StatusOr<NcclDataType> type = CheckTensor(tensor, comm_->device());
  if (!type.ok()) return FinishedCollective(type.status());
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      comm_->AllReduceSumAsync(tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                               *type, CurrentStream(comm_->device()), bucket);
  if (!pending.ok()) return FinishedCollective(pending.status());
  return std::make_unique<PendingNccl>(*std::move(pending), comm_->device());
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartReduceScatterSum(
    at::Tensor& buffer, int bucket) {
  return StartSharded(buffer, bucket, /*reduce_scatter=*/true);
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartAllGather(at::Tensor& buffer,
                                                                    int bucket) {
  return StartSharded(buffer, bucket, /*reduce_scatter=*/false);
}

std::unique_ptr<PendingCollective> NcclCommunicator::StartSharded(at::Tensor& buffer,
                                                                  int bucket,
                                                                  bool reduce_scatter) {
  absl::StatusOr<NcclDataType> type = CheckTensor(buffer, comm_->device());
  if (type.ok() && buffer.dim() != 1) {
    type =
        absl::InvalidArgumentError("a reduce-scatter or all-gather takes a 1-D buffer");
  }
  if (!type.ok()) return FinishedCollective(type.status());
  const int world = comm_->world_size();
  const int64_t n = buffer.numel();
  const int64_t part = ShardSize(n, world);
  // NCCL cuts the buffer into equal parts: an uneven one goes through a
  // zero-padded copy.
  at::Tensor target = buffer;
  if (part * world != n) {
    target = at::zeros({part * world}, buffer.options());
    target.narrow(0, 0, n).copy_(buffer);
  }
  const GpuStream stream = CurrentStream(comm_->device());
  const auto count = static_cast<size_t>(part);
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      reduce_scatter
          ? comm_->ReduceScatterSumAsync(target.data_ptr(), count, *type, stream, bucket)
          : comm_->AllGatherAsync(target.data_ptr(), count, *type, stream, bucket);
  if (!pending.ok()) return FinishedCollective(pending.status());
  auto collective = std::make_unique<PendingNccl>(*std::move(pending), comm_->device());
  if (target.data_ptr() == buffer.data_ptr()) return collective;
  const ShardRange own = ShardOf(n, world, comm_->rank());
  const int64_t begin = reduce_scatter ? own.begin : 0;
  const int64_t size = reduce_scatter ? own.size() : n;
  return std::make_unique<PendingPadded>(std::move(collective), target,
                                         target.narrow(0, begin, size),
                                         buffer.narrow(0, begin, size));
}

absl::Status NcclCommunicator::Broadcast(at::Tensor& tensor, int root) {
  absl::StatusOr<NcclDataType> type = CheckTensor(tensor, comm_->device());
  if (!type.ok()) return type.status();
  return comm_->Broadcast(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), *type,
                          root, CurrentStream(comm_->device()));
}

absl::Status NcclCommunicator::Barrier() { return comm_->Barrier(); }

void NcclCommunicator::Abort() { comm_->Abort(); }

const PendingCollectiveTracker* NcclCommunicator::collectives() const {
  return &comm_->collectives();
}

}  // namespace tessera::trainer
