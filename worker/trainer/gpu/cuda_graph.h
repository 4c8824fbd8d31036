// Whether a run captures its training step in a CUDA graph (trainer.cuda_graph:
// auto | on | off; captured_step.h does the capture). A captured step replays
// forward, backward and the optimizer as one graph launch, so the host's
// kernel launches no longer pace the GPU; it needs a step whose shapes and
// memory never change and that never waits on the host in the middle. What
// rules capture out for a run is named, one reason each, so that the log says
// why a step runs eager:
//   - not on a CUDA device, or a LibTorch without CUDA graphs or without a
//     fused AdamW that takes its learning rate as a device tensor (< 2.4);
//   - more than one rank (the buckets' all-reduce runs between backward and
//     the optimizer and is not captured yet);
//   - gradient accumulation (several backward passes per step);
//   - fp16 (the loss scaler reads the gradients' finiteness on the host);
//   - an optimizer without a captured step (model/optimizers.h: SGD and LAMB);
//   - the --fault test hook (acts on the host between phases).
// "auto" captures when nothing rules it out and says why not otherwise; "on"
// makes any reason an error before training starts; "off" never captures.
//
// Thread-safety: plain functions over values.
#ifndef TESSERA_WORKER_TRAINER_GPU_CUDA_GRAPH_H_
#define TESSERA_WORKER_TRAINER_GPU_CUDA_GRAPH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer {

// What the decision looks at, filled from the options and the build.
struct CaptureConditions {
  bool cuda_device = false;        // the rank trains on a CUDA device
  bool build_can_capture = false;  // CapturedStep::Available()
  int world_size = 1;
  int grad_accum = 1;
  std::string precision = "fp32";
  std::string optimizer = "adamw";
  bool optimizer_capturable = true;  // its row in model/optimizers.h says so
  bool fault_hook = false;
};

struct CaptureDecision {
  bool capture = false;
  std::vector<std::string> reasons;  // why not, when not (empty for "off")
};

// InvalidArgument for an unknown mode; FailedPrecondition, naming every
// reason, for "on" when something rules capture out.
absl::StatusOr<CaptureDecision> DecideCapture(const std::string& mode,
                                              const CaptureConditions& conditions);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_CUDA_GRAPH_H_
