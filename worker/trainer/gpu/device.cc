#include "worker/trainer/gpu/device.h"

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#if TESSERA_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#if TESSERA_HAVE_CUDA_RUNTIME
#include "worker/trainer/gpu/cuda_step_timer.h"
#endif
#endif

namespace tessera::trainer {

#if TESSERA_TORCH_CUDA
namespace {

c10::DeviceIndex ToDeviceIndex(int index) { return static_cast<c10::DeviceIndex>(index); }

class CudaCopies final : public DeviceCopyStream::Copies {
 public:
  explicit CudaCopies(c10::DeviceIndex device) : device_(device) {}
  at::cuda::CUDAEvent& done() { return done_; }

  void WaitOnCurrentStream(std::initializer_list<const at::Tensor*> used) override {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_);
    done_.block(compute);
    for (const at::Tensor* t : used) {
      if (t->defined()) t->record_stream(compute);
    }
  }

 private:
  const c10::DeviceIndex device_;
  at::cuda::CUDAEvent done_;
};

class CudaCopyStream final : public DeviceCopyStream {
 public:
  explicit CudaCopyStream(c10::DeviceIndex device)
      : device_(device),
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}

  std::unique_ptr<Copies> Run(const std::function<void()>& copies) override {
    const c10::cuda::CUDAStreamGuard on_side(side_);
    copies();
    auto in_flight = std::make_unique<CudaCopies>(device_);
    in_flight->done().record(side_);
    return in_flight;
  }

 private:
  const c10::DeviceIndex device_;
  c10::cuda::CUDAStream side_;
};

}  // namespace

bool TorchHasCuda() { return true; }

int VisibleTorchCudaDevices() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

absl::Status MakeCudaDeviceCurrent(int index) {
  try {
    c10::cuda::set_device(ToDeviceIndex(index));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("making cuda:", index, " current: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

void* CurrentCudaStream(int index) {
  return c10::cuda::getCurrentCUDAStream(ToDeviceIndex(index)).stream();
}

void SynchronizeCuda() { torch::cuda::synchronize(); }

absl::StatusOr<std::unique_ptr<StepTimer>> MakeDeviceStepTimer(bool cuda, int index) {
#if TESSERA_HAVE_CUDA_RUNTIME
  if (cuda) {
    return MakeCudaStepTimer(
        index, c10::cuda::getCurrentCUDAStream(ToDeviceIndex(index)).stream());
  }
#endif
  (void)cuda;
  (void)index;
  return MakeHostStepTimer();
}

std::optional<at::Tensor> CudaRngState(int index) {
  at::Generator generator =
      at::cuda::detail::getDefaultCUDAGenerator(ToDeviceIndex(index));
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetCudaRngState(int index, const at::Tensor& state) {
  at::Generator generator =
      at::cuda::detail::getDefaultCUDAGenerator(ToDeviceIndex(index));
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

std::unique_ptr<DeviceCopyStream> DeviceCopyStream::Create(const c10::Device& device) {
  if (!device.is_cuda()) return nullptr;
  return std::make_unique<CudaCopyStream>(device.index());
}

#else  // A LibTorch without CUDA: no device, so nothing to do.

bool TorchHasCuda() { return false; }

int VisibleTorchCudaDevices() { return 0; }

absl::Status MakeCudaDeviceCurrent(int index) {
  return absl::FailedPreconditionError(absl::StrCat(
      "cuda:", index, ": this tessera-train's LibTorch was built without CUDA"));
}

void* CurrentCudaStream(int /*index*/) { return nullptr; }

void SynchronizeCuda() {}

absl::StatusOr<std::unique_ptr<StepTimer>> MakeDeviceStepTimer(bool /*cuda*/,
                                                               int /*index*/) {
  return MakeHostStepTimer();
}

std::optional<at::Tensor> CudaRngState(int /*index*/) { return std::nullopt; }

void SetCudaRngState(int /*index*/, const at::Tensor& /*state*/) {}

std::unique_ptr<DeviceCopyStream> DeviceCopyStream::Create(
    const c10::Device& /*device*/) {
  return nullptr;
}

#endif

}  // namespace tessera::trainer
