#include "worker/trainer/gpu/device_memory.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "common/device_figures.h"

#if TESSERA_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace tessera::trainer {
namespace {

// The process's NVML, loaded on first use; null where the driver's library
// is missing (then no NVML figures are reported).
GpuMonitor* ProcessNvml() {
  static std::unique_ptr<GpuMonitor>* const monitor = [] {
    absl::StatusOr<std::unique_ptr<GpuMonitor>> opened = OpenNvml();
    return new std::unique_ptr<GpuMonitor>(opened.ok() ? std::move(*opened) : nullptr);
  }();
  return monitor->get();
}

#if TESSERA_TORCH_CUDA
void AppendAllocatorFigures(int device_index, FigureValues& values) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  // Index 0 is StatType::AGGREGATE (all pools), in every LibTorch version;
  // the enum itself moved namespaces in 2.4.
  constexpr size_t kAggregate = 0;
  values.emplace_back(kCudaAllocatedFigure,
                      static_cast<double>(stats.allocated_bytes[kAggregate].current));
  values.emplace_back(kCudaPeakAllocatedFigure,
                      static_cast<double>(stats.allocated_bytes[kAggregate].peak));
  values.emplace_back(kCudaReservedFigure,
                      static_cast<double>(stats.reserved_bytes[kAggregate].current));
}
#endif

}  // namespace

void AppendDeviceMemory(bool cuda, int device_index, FigureValues& values) {
  if (!cuda) {
    AppendPeakRss(values);
    return;
  }
#if TESSERA_TORCH_CUDA
  AppendAllocatorFigures(device_index, values);
#endif
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  AppendNvmlFigures(
      ProcessNvml(),
      RankGpuId(visible == nullptr ? std::nullopt : std::optional<std::string>(visible),
                device_index),
      values);
}

}  // namespace tessera::trainer
