#include "worker/trainer/dist/stop_agreement.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <thread>

#include "common/status_macros.h"

namespace tessera::trainer {

struct StopAgreement::LaggedRead {
  torch::Tensor host;  // pinned, one float
  c10::Event copied{c10::DeviceType::CUDA};
  bool pending = false;  // a copy was issued and not read yet
};

StopAgreement::StopAgreement(const std::atomic<bool>* requested, Reducer& reducer,
                             Communicator& communicator, bool gradients_synchronized,
                             const c10::Device& device)
    : requested_(requested),
      reducer_(reducer),
      communicator_(communicator),
      mode_(requested == nullptr             ? Mode::kOff
            : communicator.world_size() == 1 ? Mode::kAlone
            : !gradients_synchronized        ? Mode::kOwnCollective
            : device.is_cuda()               ? Mode::kControlWordLagged
                                             : Mode::kControlWord),
      device_(device) {
  if (mode_ == Mode::kControlWordLagged) {
    lagged_ = std::make_unique<LaggedRead>();
    lagged_->host = torch::empty(
        {1}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
  }
}

StopAgreement::~StopAgreement() = default;

bool StopAgreement::Requested() const {
  return requested_ != nullptr && requested_->load(std::memory_order_relaxed);
}

void StopAgreement::Vote() {
  if ((mode_ == Mode::kControlWord || mode_ == Mode::kControlWordLagged) && Requested()) {
    reducer_.SetControlWord(1.0f);
  }
}

absl::StatusOr<bool> StopAgreement::Decide() {
  switch (mode_) {
    case Mode::kOff:
      return false;
    case Mode::kAlone:
      return Requested();
    case Mode::kControlWord:
      return reducer_.control_word().item<float>() > 0;
    case Mode::kControlWordLagged: {
      // The previous step's sum, copied to the host then; the copy is almost
      // always done by now, so this waits for nothing.
      bool agreed = false;
      if (lagged_->pending) {
        while (!lagged_->copied.query()) std::this_thread::yield();
        agreed = lagged_->host.data_ptr<float>()[0] > 0;
      }
      lagged_->host.copy_(reducer_.control_word(), /*non_blocking=*/true);
      lagged_->copied.record(
          c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_));
      lagged_->pending = true;
      return agreed;
    }
    case Mode::kOwnCollective: {
      torch::Tensor vote =
          torch::full({1}, Requested() ? 1.0 : 0.0,
                      torch::TensorOptions(device_).dtype(torch::kFloat));
      RETURN_IF_ERROR(communicator_.AllReduceSum(vote));
      return vote.item<float>() > 0;
    }
  }
  return false;
}

}  // namespace tessera::trainer
