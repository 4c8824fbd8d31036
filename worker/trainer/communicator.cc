#include "worker/trainer/communicator.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {

absl::Status LocalCommunicator::AllReduceSum(at::Tensor& /*tensor*/) {
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Broadcast(at::Tensor& /*tensor*/, int root) {
  if (root != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not a rank of a world of 1"));
  }
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Barrier() { return absl::OkStatus(); }

}  // namespace tessera::trainer
