// The names of the figures a rank reports about its device's memory and use,
// shared by the trainer (which reports them as metric rows), the coordinator
// (which keeps each running rank's latest for /metrics) and tessctl and the
// dashboard (which show them). A rank reports only those its machine has: a
// CPU rank its peak RSS, a CUDA rank the caching allocator's figures, and
// the NVML ones only where the NVIDIA driver's library loads.
//
// Thread-safe: constants.
#ifndef TESSERA_COMMON_DEVICE_FIGURES_H_
#define TESSERA_COMMON_DEVICE_FIGURES_H_

#include <array>
#include <string_view>

namespace tessera {

// The trainer's throughput and step time (already in every interval report).
inline constexpr char kImagesPerSecFigure[] = "images_per_sec";
inline constexpr char kStepTimeMsFigure[] = "time_step_ms";
// LibTorch's CUDA caching allocator, on the rank's device, in bytes.
inline constexpr char kCudaAllocatedFigure[] = "cuda_allocated_bytes";
inline constexpr char kCudaPeakAllocatedFigure[] = "cuda_peak_allocated_bytes";
inline constexpr char kCudaReservedFigure[] = "cuda_reserved_bytes";
// NVML, for the rank's device as a whole (every process on it).
inline constexpr char kGpuUtilizationFigure[] = "gpu_utilization_percent";
inline constexpr char kGpuMemoryUsedFigure[] = "gpu_memory_used_bytes";
// A CPU rank: the process's peak resident set (VmHWM), in bytes.
inline constexpr char kPeakRssFigure[] = "peak_rss_bytes";

// The memory and utilisation figures, in the order they are shown.
inline constexpr std::array<std::string_view, 6> kDeviceFigures = {
    kCudaAllocatedFigure,  kCudaPeakAllocatedFigure, kCudaReservedFigure,
    kGpuUtilizationFigure, kGpuMemoryUsedFigure,     kPeakRssFigure};

}  // namespace tessera

#endif  // TESSERA_COMMON_DEVICE_FIGURES_H_
