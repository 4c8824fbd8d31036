#include "worker/trainer/gpu/capture_schedule.h"

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace tessera::trainer {

absl::StatusOr<CaptureSchedule::Action> CaptureSchedule::Step(Steps& steps) {
  const Action action = process_steps_ < kEagerSteps ? Action::kEager
                        : captured_                  ? Action::kReplay
                                                     : Action::kCapture;
  steps.WriteStepValues();
  switch (action) {
    case Action::kEager:
      RETURN_IF_ERROR(steps.RunEager());
      break;
    case Action::kCapture:
      RETURN_IF_ERROR(steps.Capture());
      captured_ = true;
      RETURN_IF_ERROR(steps.Replay());
      break;
    case Action::kReplay:
      steps.AdvanceHostCopies();
      RETURN_IF_ERROR(steps.Replay());
      break;
  }
  ++process_steps_;
  return action;
}

}  // namespace tessera::trainer
