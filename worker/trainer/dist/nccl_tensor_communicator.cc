#include "worker/trainer/dist/nccl_tensor_communicator.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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
