// The order of a captured run's steps (cuda_graph.h decides whether a run
// captures; captured_step.h captures and replays), counted in this process's
// steps, so that a resumed run warms up exactly as a fresh one:
//  - the process's first kEagerSteps steps run eager, on the capture stream:
//    the first makes the optimizer's state and LibTorch's lazily made handles
//    (cuBLAS makes its workspaces per stream), the second runs with them;
//  - the next step is captured, which runs its host side once, then replayed;
//  - every later step is replayed.
// Before every step, eager or not, the values the graph reads that change from
// step to step are written to their device tensors (captured_step.h lists
// them). Before each replay after the capturing step, the host copies of what
// the step's host side would have moved on (the optimizer's step counts) move
// on, since a replay runs none of it.
//
// Thread-safety: not thread-safe; the training thread owns it.
#ifndef TESSERA_WORKER_TRAINER_GPU_CAPTURE_SCHEDULE_H_
#define TESSERA_WORKER_TRAINER_GPU_CAPTURE_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace tessera::trainer {

class CaptureSchedule {
 public:
  static constexpr int64_t kEagerSteps = 2;

  // What a step calls: the trainer's run, or a test's fake of the capture.
  class Steps {
   public:
    virtual ~Steps() = default;
    // The step's per-step values (learning rates, step counts) into the
    // device tensors that the graph reads.
    virtual void WriteStepValues() = 0;
    virtual absl::Status RunEager() = 0;
    // Records one step in a graph; its host side runs once, its device work
    // not at all.
    virtual absl::Status Capture() = 0;
    // The host side's bookkeeping that a replay skips.
    virtual void AdvanceHostCopies() = 0;
    virtual absl::Status Replay() = 0;
  };

  enum class Action { kEager, kCapture, kReplay };

  // Runs this process's next step through `steps` and says how it ran. An
  // error from `steps` is returned as is; the step is not counted.
  absl::StatusOr<Action> Step(Steps& steps);

  int64_t process_steps() const { return process_steps_; }

 private:
  int64_t process_steps_ = 0;
  bool captured_ = false;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_CAPTURE_SCHEDULE_H_
