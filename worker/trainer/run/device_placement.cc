#include "worker/trainer/run/device_placement.h"

#include <c10/core/Device.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/gpu/device.h"

namespace tessera::trainer {

std::string DevicePlacement::name() const {
  return cuda ? absl::StrCat("cuda:", index) : "cpu";
}

absl::StatusOr<DevicePlacement> ResolveDevice(const TrainerOptions& options,
                                              int local_rank) {
  DevicePlacement placement;
  if (options.device != "cpu") {
    const int count = VisibleTorchCudaDevices();
    if (count > 0) {
      placement.cuda = true;
      ASSIGN_OR_RETURN(placement.index, CudaDeviceForLocalRank(local_rank, count));
    } else if (options.device == "cuda") {
      return absl::FailedPreconditionError(
          TorchHasCuda()
              ? "--device=cuda: no CUDA device is visible"
              : "--device=cuda: this tessera-train's LibTorch was built without CUDA");
    }
  }
  if (!placement.cuda && options.precision != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision=", options.precision,
        " needs a CUDA device (mixed precision runs under CUDA autocast); this rank "
        "trains on the CPU: use --precision=fp32"));
  }
  return placement;
}

absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank, int visible) {
  if (visible < 1) return absl::FailedPreconditionError("no CUDA device is visible");
  if (visible == 1) return 0;
  if (local_rank < 0 || local_rank >= visible) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local rank ", local_rank, " has no CUDA device of its own: ", visible,
        " devices are visible (devices 0 to ", visible - 1,
        "); start at most that many ranks per host, or give each rank one device "
        "through CUDA_VISIBLE_DEVICES"));
  }
  return local_rank;
}

c10::Device TorchDevice(const DevicePlacement& placement) {
  return placement.cuda
             ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(placement.index))
             : c10::Device(c10::kCPU);
}

absl::Status MakePlacementCurrent(const DevicePlacement& placement) {
  if (!placement.cuda) return absl::OkStatus();
  return MakeCudaDeviceCurrent(placement.index);
}

}  // namespace tessera::trainer
