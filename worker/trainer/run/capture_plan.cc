#include "worker/trainer/run/capture_plan.h"

#include <torch/torch.h>

#include <utility>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "worker/trainer/gpu/cuda_graph.h"
#include "worker/trainer/model/optimizers.h"

namespace tessera::trainer {

absl::StatusOr<CapturePlan> PlanCapture(const TrainerOptions& options,
                                        const DevicePlacement& placement, int world_size,
                                        bool fault_hook,
                                        torch::optim::Optimizer& optimizer) {
  CaptureConditions conditions;
  conditions.cuda_device = placement.cuda;
  conditions.build_can_capture = CapturedStep::Available();
  conditions.world_size = world_size;
  conditions.grad_accum = options.grad_accum;
  conditions.precision = options.precision;
  conditions.optimizer = options.optimizer;
  const OptimizerKind* kind = FindOptimizer(options.optimizer);
  conditions.optimizer_capturable = kind != nullptr && kind->capturable;
  conditions.fault_hook = fault_hook;
  ASSIGN_OR_RETURN(CaptureDecision decision,
                   DecideCapture(options.cuda_graph, conditions));
  CapturePlan plan;
  if (decision.capture) {
    plan.adamw = dynamic_cast<FusedAdamW*>(&optimizer);
    const absl::Status capturable =
        plan.adamw != nullptr
            ? plan.adamw->EnableCapture()
            : absl::FailedPreconditionError("the optimizer is not tessera's fused AdamW");
    if (!capturable.ok()) {
      if (options.cuda_graph == "on") return capturable;
      decision.capture = false;
      decision.reasons.emplace_back(capturable.message());
    }
  }
  plan.capture = decision.capture;
  plan.reasons = std::move(decision.reasons);
  if (plan.capture) {
    ASSIGN_OR_RETURN(plan.stream, CapturedStep::StreamScope::Enter(placement.index));
  }
  return plan;
}

}  // namespace tessera::trainer
