#include "worker/trainer/dist/communicator.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {
namespace {

class Finished final : public PendingCollective {
 public:
  explicit Finished(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  const absl::Status status_;
};

}  // namespace

std::unique_ptr<PendingCollective> FinishedCollective(absl::Status status) {
  return std::make_unique<Finished>(std::move(status));
}

absl::Status Communicator::AllReduceSum(at::Tensor& tensor) {
  return AllReduceSumAsync(tensor)->Wait();
}

absl::Status Communicator::ReduceScatterSum(at::Tensor& buffer) {
  return ReduceScatterSumAsync(buffer)->Wait();
}

absl::Status Communicator::AllGather(at::Tensor& buffer) {
  return AllGatherAsync(buffer)->Wait();
}

std::unique_ptr<PendingCollective> LocalCommunicator::StartAllReduceSum(
    at::Tensor& /*tensor*/, int /*bucket*/) {
  return FinishedCollective(absl::OkStatus());
}

// A world of one owns the whole buffer: its sum and its gather are itself.
std::unique_ptr<PendingCollective> LocalCommunicator::StartReduceScatterSum(
    at::Tensor& /*buffer*/, int /*bucket*/) {
  return FinishedCollective(absl::OkStatus());
}

std::unique_ptr<PendingCollective> LocalCommunicator::StartAllGather(
    at::Tensor& /*buffer*/, int /*bucket*/) {
  return FinishedCollective(absl::OkStatus());
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
