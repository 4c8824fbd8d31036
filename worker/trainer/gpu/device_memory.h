// The rank's device memory and use, appended to each interval's metric report
// (TrainingRun::ReportInterval): on a CUDA device LibTorch's caching-allocator
// figures (allocated now and at peak, reserved) and NVML's utilisation and
// memory in use of the GPU; on the CPU the process's peak RSS
// (rank_figures.h). The allocator part is compiled only in a CUDA build
// (TESSERA_TORCH_CUDA).
//
// NVML is loaded once per process, on the first report from a CUDA device,
// and kept: a trainer process is one rank on one device.
//
// Thread-safety: call from the training loop's thread.
#ifndef TESSERA_WORKER_TRAINER_GPU_DEVICE_MEMORY_H_
#define TESSERA_WORKER_TRAINER_GPU_DEVICE_MEMORY_H_

#include "worker/trainer/gpu/rank_figures.h"

namespace tessera::trainer {

// `cuda`: the rank trains on CUDA device `device_index`; otherwise on the CPU.
void AppendDeviceMemory(bool cuda, int device_index, FigureValues& values);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_DEVICE_MEMORY_H_
