// The rank's figures for its metric reports (names in common/device_figures.h),
// from sources that need no LibTorch: the process's peak RSS on a CPU rank,
// and NVML's utilisation and memory of a CUDA rank's GPU. device_memory.h
// adds the CUDA caching allocator's figures and calls these.
//
// A figure that cannot be read is left out: a machine without the NVIDIA
// driver reports no GPU figures, without an error.
//
// Thread-safety: free functions; `monitor` must be safe to read (NVML is).
#ifndef TESSERA_WORKER_TRAINER_GPU_RANK_FIGURES_H_
#define TESSERA_WORKER_TRAINER_GPU_RANK_FIGURES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu_monitor.h"

namespace tessera::trainer {

using FigureValues = std::vector<std::pair<std::string, double>>;

// VmHWM of a /proc/PID/status file, in bytes; nullopt when absent.
std::optional<int64_t> PeakRssBytes(const std::string& proc_status = "/proc/self/status");

// The id NVML knows the rank's CUDA device `index` by: entry `index` of
// `visible_devices` (CUDA_VISIBLE_DEVICES; the worker gives each rank its
// own), or `index` itself when that is unset.
std::string RankGpuId(const std::optional<std::string>& visible_devices, int index);

// Appends NVML's utilisation and memory in use of GPU `id`; nothing when
// `monitor` is null or cannot read it.
void AppendNvmlFigures(GpuMonitor* monitor, const std::string& id, FigureValues& values);

// Appends the process's peak RSS (a CPU rank's figure).
void AppendPeakRss(FigureValues& values,
                   const std::string& proc_status = "/proc/self/status");

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_RANK_FIGURES_H_
