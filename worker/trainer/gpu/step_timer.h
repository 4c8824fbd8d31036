// Per-step wall-clock breakdown, as DeepSpeed's wall_clock_breakdown reports it:
// how long each step spent waiting for data, in forward, in backward, waiting on
// gradient communication that backward did not hide (exposed communication), in
// the optimizer, and in all.
//
// The loop brackets a step with BeginStep / EndStep and calls Mark(phase) when a
// phase ends; the time since the previous mark counts towards that phase (a phase
// may end several times per step, e.g. forward and backward once per micro-batch
// under gradient accumulation). TakeTotals returns the sums since the last call.
// The host timer reads a monotonic clock; the CUDA timer (cuda_step_timer.h)
// records events on the compute stream instead, so timing adds no device syncs.
//
// Not thread-safe: one training loop owns a timer.
#ifndef TESSERA_WORKER_TRAINER_GPU_STEP_TIMER_H_
#define TESSERA_WORKER_TRAINER_GPU_STEP_TIMER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera::trainer {

enum class StepPhase { kData = 0, kForward, kBackward, kComm, kOptimizer };
inline constexpr int kStepPhaseCount = 5;

// Indexed by StepPhase; the metrics are time_<name>_ms, the device times of a
// progress report (tessera.v1.RankProgress.device_phase_ms) are keyed by them.
inline constexpr std::array<const char*, kStepPhaseCount> kStepPhaseNames = {
    "data", "forward", "backward", "comm", "optimizer"};

struct StepTimes {
  std::array<double, kStepPhaseCount> phase_seconds{};  // indexed by StepPhase
  double step_seconds = 0;                              // BeginStep to EndStep
  int64_t steps = 0;                                    // steps ended

  double seconds(StepPhase phase) const {
    return phase_seconds[static_cast<size_t>(phase)];
  }
};

class StepTimer {
 public:
  virtual ~StepTimer() = default;

  // A step starts now; so does its first phase.
  virtual void BeginStep() = 0;
  // `phase` ends now: the time since BeginStep or the previous Mark is its.
  virtual void Mark(StepPhase phase) = 0;
  // The step ends now.
  virtual void EndStep() = 0;
  // The sums over the steps ended since the previous call. A device timer waits
  // here for the recorded work to finish.
  virtual StepTimes TakeTotals() = 0;
  // Whether the times are the device's own (events on its stream) rather than
  // the host's, which on a GPU only show where the host waited.
  virtual bool on_device() const = 0;
};

// A timer reading `now` (a monotonic clock by default; tests pass a fake).
std::unique_ptr<StepTimer> MakeHostStepTimer(std::function<absl::Time()> now = [] {
  return absl::Now();
});

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_STEP_TIMER_H_
