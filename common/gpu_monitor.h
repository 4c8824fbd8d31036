// GpuMonitor: what a GPU is doing right now (utilisation, memory, temperature,
// power), read through NVIDIA's NVML. The worker reads each GPU it owns with
// every heartbeat, and a CUDA rank reads its own GPU with each metric report.
//
// NVML is the driver's library: OpenNvml() loads it at run time with dlopen,
// so that the binaries need no CUDA at build time and run where there is no
// driver (then there is no monitor, and nothing is reported, without error).
// GpuMonitor is the seam: tests use a fake monitor, or a fake NVML library
// (tests/testing/fake_nvml.c) loaded by path.
//
// GPU ids are those CUDA_VISIBLE_DEVICES takes: an index or a "GPU-" UUID.
// An index is NVML's, which follows the PCI bus order; CUDA's own order is the
// same unless the node mixes GPU models (CUDA_DEVICE_ORDER). MIG instances
// ("MIG-...") are not read.
//
// Thread-safety: NVML is thread-safe; so is Read().
#ifndef TESSERA_COMMON_GPU_MONITOR_H_
#define TESSERA_COMMON_GPU_MONITOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace tessera {

// One GPU's readings; a field NVML could not read is unset.
struct GpuReading {
  std::string id;
  std::optional<double> utilization_percent;  // busy share of the last sample period
  std::optional<int64_t> memory_used_bytes;   // every process on the GPU
  std::optional<int64_t> memory_total_bytes;
  std::optional<double> temperature_celsius;
  std::optional<double> power_watts;
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  // NotFound for an id the library does not know (or a MIG id).
  virtual absl::StatusOr<GpuReading> Read(const std::string& id) = 0;
};

// The driver's NVML library, as the CUDA runtime names it.
inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

// NVML from `library` (a name dlopen searches for, or a path). Unavailable
// when the library is missing, lacks a function used here, or fails to
// initialise (no driver, no GPU): callers then report no GPU figures.
absl::StatusOr<std::unique_ptr<GpuMonitor>> OpenNvml(
    const std::string& library = kNvmlLibrary);

}  // namespace tessera

#endif  // TESSERA_COMMON_GPU_MONITOR_H_
