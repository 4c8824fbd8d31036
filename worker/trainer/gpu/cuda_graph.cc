#include "worker/trainer/gpu/cuda_graph.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::trainer {
namespace {

std::vector<std::string> ReasonsAgainst(const CaptureConditions& c) {
  std::vector<std::string> reasons;
  if (!c.cuda_device) reasons.push_back("the rank does not train on a CUDA device");
  if (c.cuda_device && !c.build_can_capture) {
    reasons.push_back(
        "this tessera-train's LibTorch has no CUDA graphs with a device learning rate "
        "for the fused AdamW (LibTorch 2.4 or newer with CUDA)");
  }
  if (c.world_size > 1) {
    reasons.push_back(absl::StrCat("world size ", c.world_size,
                                   ": the gradient all-reduce between backward and the "
                                   "optimizer is not captured"));
  }
  if (c.grad_accum > 1) {
    reasons.push_back(absl::StrCat("gradient accumulation (", c.grad_accum,
                                   " backward passes per step)"));
  }
  if (c.precision == "fp16") {
    reasons.push_back(
        "fp16: the loss scaler reads the gradients' finiteness on the host");
  }
  if (!c.optimizer_capturable) {
    reasons.push_back(absl::StrCat("optimizer ", c.optimizer, " has no captured step"));
  }
  if (c.fault_hook) reasons.push_back("the --fault test hook acts between phases");
  return reasons;
}

}  // namespace

absl::StatusOr<CaptureDecision> DecideCapture(const std::string& mode,
                                              const CaptureConditions& conditions) {
  if (mode != "auto" && mode != "on" && mode != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_graph must be auto, on or off, got \"", mode, "\""));
  }
  CaptureDecision decision;
  if (mode == "off") return decision;
  decision.reasons = ReasonsAgainst(conditions);
  decision.capture = decision.reasons.empty();
  if (mode == "on" && !decision.capture) {
    return absl::FailedPreconditionError(
        absl::StrCat("--cuda-graph on, but the step cannot be captured: ",
                     absl::StrJoin(decision.reasons, "; ")));
  }
  return decision;
}

}  // namespace tessera::trainer
