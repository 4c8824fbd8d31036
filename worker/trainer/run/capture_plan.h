// Whether a run captures its training step in a CUDA graph and replays it
// (trainer.cuda_graph: off | auto | on), and what capturing needs made ready.
// gpu/cuda_graph.h decides from the run's conditions (a CUDA device, a world
// of one, no gradient accumulation, the precision, the optimizer's row in
// model/optimizers.h, no --fault hook); then tessera's fused AdamW must take
// the capture (FusedAdamW::EnableCapture), and the step moves to a stream of
// its own, current from then on. "auto" falls back to eager steps and says
// why; "on" fails instead.
//
// Use: PlanCapture once the optimizer exists and before anything queues work
// on the current stream (the data feeds, the step timer); keep the plan, whose
// stream scope lasts as long as it does.
//
// Thread-safety: call on the training loop's thread, whose current stream the
// plan sets.
#ifndef TESSERA_WORKER_TRAINER_RUN_CAPTURE_PLAN_H_
#define TESSERA_WORKER_TRAINER_RUN_CAPTURE_PLAN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/gpu/captured_step.h"
#include "worker/trainer/model/fused_adamw.h"
#include "worker/trainer/run/device_placement.h"
#include "worker/trainer/run/trainer_options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace tessera::trainer {

struct CapturePlan {
  bool capture = false;
  // When the decision was to capture: the optimizer as tessera's fused AdamW
  // (null if it is not), whose learning rates and step counts the loop writes
  // to its device tensors before every step. Not owned.
  FusedAdamW* adamw = nullptr;
  // While capturing: the step's stream, current until the scope ends.
  std::unique_ptr<CapturedStep::StreamScope> stream;
  // Why the step runs eager, when it does (empty for "off").
  std::vector<std::string> reasons;
};

// The plan of a run with `options` on `placement` in a world of `world_size`
// ranks, `fault_hook` when --fault is active, stepping `optimizer`.
// InvalidArgument for an unknown mode; FailedPrecondition for "on" when
// something rules capture out; the stream's error.
absl::StatusOr<CapturePlan> PlanCapture(const TrainerOptions& options,
                                        const DevicePlacement& placement, int world_size,
                                        bool fault_hook,
                                        torch::optim::Optimizer& optimizer);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_CAPTURE_PLAN_H_
