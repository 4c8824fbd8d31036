// The device seam: what the trainer's CPU logic needs of a CUDA device, with
// no CUDA header and no TESSERA_TORCH_CUDA guard outside worker/trainer/gpu/
// (tests/layering/layering_test.sh holds every other folder to that).
//
// gpu/device.cc implements it over LibTorch's CUDA API in a LibTorch built with
// CUDA, and trivially otherwise: no device is visible, making one current
// fails with FailedPrecondition, there is no side stream (copies then run on
// the current stream), synchronising does nothing, the generator state is
// empty and the step timer reads the host clock.
//
// Thread-safety: the free functions may be called from any thread (LibTorch's
// current device and stream are per thread). A DeviceCopyStream and its Copies
// belong to one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_GPU_DEVICE_H_
#define TESSERA_WORKER_TRAINER_GPU_DEVICE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/gpu/step_timer.h"

namespace tessera::trainer {

// Whether this tessera-train's LibTorch was built with CUDA.
bool TorchHasCuda();

// CUDA devices LibTorch sees (0 without CUDA or without a driver).
int VisibleTorchCudaDevices();

// Makes CUDA device `index` current on this thread (LibTorch's device guard).
absl::Status MakeCudaDeviceCurrent(int index);

// LibTorch's current stream on CUDA device `index` as a cudaStream_t
// (gpu_api.h's GpuStream); nullptr without CUDA.
void* CurrentCudaStream(int index);

// Waits until every queued kernel and copy of the current device is done.
void SynchronizeCuda();

// Timing of the step's phases: CUDA events on the current stream of a CUDA
// device (`cuda`, device `index`), the host clock otherwise.
absl::StatusOr<std::unique_ptr<StepTimer>> MakeDeviceStepTimer(bool cuda, int index);

// The default CUDA generator's state of device `index` (a byte tensor), or
// nullopt without CUDA; SetCudaRngState puts one back (no-op without CUDA).
std::optional<at::Tensor> CudaRngState(int index);
void SetCudaRngState(int index, const at::Tensor& state);

// Host-to-device copies on a side stream of their device, so that the next
// batch travels while the current one trains.
class DeviceCopyStream {
 public:
  // One batch's copies, in flight on the side stream.
  class Copies {
   public:
    virtual ~Copies() = default;
    // Makes the current (compute) stream wait for the copies, and tells the
    // caching allocator that `used` (allocated on the side stream) are used
    // on the compute stream. Undefined tensors are skipped.
    virtual void WaitOnCurrentStream(std::initializer_list<const at::Tensor*> used) = 0;
  };

  // A side stream of `device`; nullptr for a CPU device or without CUDA (then
  // copy on the current stream).
  static std::unique_ptr<DeviceCopyStream> Create(const c10::Device& device);

  virtual ~DeviceCopyStream() = default;

  // Runs `copies` (asynchronous copies from pinned memory) with the side stream
  // current, and marks their end.
  virtual std::unique_ptr<Copies> Run(const std::function<void()>& copies) = 0;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_DEVICE_H_
