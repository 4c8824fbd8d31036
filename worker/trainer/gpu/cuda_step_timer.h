// The StepTimer (step_timer.h) of a rank that trains on a CUDA device: every mark
// records a CUDA event on the compute stream, and TakeTotals waits for the last
// one and reads the elapsed times between consecutive events. Timing thus
// follows the device's own timeline and adds no synchronisation to the step
// (only TakeTotals, every metrics interval, waits).
//
// Built where the CUDA runtime is found (TESSERA_HAVE_CUDA_RUNTIME). Not
// thread-safe, like every StepTimer.
#ifndef TESSERA_WORKER_TRAINER_GPU_CUDA_STEP_TIMER_H_
#define TESSERA_WORKER_TRAINER_GPU_CUDA_STEP_TIMER_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "worker/trainer/gpu/step_timer.h"

namespace tessera::trainer {

// A timer recording on `stream` of CUDA device `device`. FailedPrecondition when
// the device is not visible.
absl::StatusOr<std::unique_ptr<StepTimer>> MakeCudaStepTimer(int device,
                                                             cudaStream_t stream);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_CUDA_STEP_TIMER_H_
