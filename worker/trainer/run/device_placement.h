// Where a rank trains: the CPU, or the CUDA device that is its own on its
// machine (one device per local rank, or the one device the launcher left it
// through CUDA_VISIBLE_DEVICES), and whether the precision it asks for can run
// there.
//
// Use: tessera-train resolves the placement from --device and the local rank
// first, then makes it current (MakePlacementCurrent) before anything touches
// CUDA; the trainer and the evaluation resolve the same placement again.
//
// Thread-safety: ResolveDevice and CudaDeviceForLocalRank are safe from any
// thread; MakePlacementCurrent sets the calling thread's current device.
#ifndef TESSERA_WORKER_TRAINER_RUN_DEVICE_PLACEMENT_H_
#define TESSERA_WORKER_TRAINER_RUN_DEVICE_PLACEMENT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/run/trainer_options.h"

// LibTorch's device type, declared only: this header stays free of LibTorch
// (trainer.h includes it); callers of TorchDevice include <c10/core/Device.h>.
namespace c10 {
struct Device;
}  // namespace c10

namespace tessera::trainer {

// Where a rank trains.
struct DevicePlacement {
  bool cuda = false;
  int index = -1;            // CUDA device index; -1 on the CPU
  std::string name() const;  // "cpu" or "cuda:N"
};

// Resolves --device for the rank with this local rank: "cpu"; "cuda" (the
// device CudaDeviceForLocalRank picks; FailedPrecondition when LibTorch has no
// CUDA or no device is visible); "auto" (CUDA when possible, else the CPU).
// InvalidArgument when --precision bf16/fp16 meets a CPU placement: mixed
// precision runs only under CUDA autocast here.
absl::StatusOr<DevicePlacement> ResolveDevice(const TrainerOptions& options,
                                              int local_rank);

// The CUDA device of the rank with `local_rank` when `visible` devices are
// visible: device local_rank when several are (one per local rank), device 0
// when one is (the launcher gave each rank its own through
// CUDA_VISIBLE_DEVICES). FailedPrecondition when several are visible but not
// local_rank + 1: ranks must not share a GPU by accident.
absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank, int visible);

// The placement as a LibTorch device: kCUDA with its index, or kCPU.
c10::Device TorchDevice(const DevicePlacement& placement);

// Makes the placement's CUDA device current for the calling thread (a no-op on
// the CPU). tessera-train calls it right after ResolveDevice, before anything
// else touches CUDA (NCCL, the model), so that no context is created on a GPU
// of another rank.
absl::Status MakePlacementCurrent(const DevicePlacement& placement);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_DEVICE_PLACEMENT_H_
