// How a ViT's parameters are grouped for training: into the optimizer's groups
// (weight decay on the weight matrices only; or, for the fine-tuning recipes,
// one group per layer, weight decay and head, each at its layer's
// learning-rate scale: vit_weights.h) and into ZeRO stage 3's units (each
// encoder block's parameters, gathered and freed together).
//
// Use: build the groups over the tensors the optimizer updates (the parameters
// themselves, WholeParameter, or ZeRO's pieces of them), make the optimizer
// over ParamGroups::groups (optimizers.h), and keep each group's lr_scale and
// head flag for the learning-rate schedule (run/lr_schedule.h).
//
// Thread-safety: plain functions; the model must not change while they run.
#ifndef TESSERA_WORKER_TRAINER_MODEL_PARAM_GROUPS_H_
#define TESSERA_WORKER_TRAINER_MODEL_PARAM_GROUPS_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "worker/trainer/model/optimizers.h"
#include "worker/trainer/model/vit.h"

namespace tessera::trainer {

// The tensor an optimizer updates for a model parameter: the parameter
// itself, or (ZeRO) this rank's piece of it; undefined: none on this rank.
using OptimizedTensor = std::function<at::Tensor(const at::Tensor&)>;

// The parameter itself: the OptimizedTensor of a rank that keeps every
// parameter whole.
at::Tensor WholeParameter(const at::Tensor& parameter);

struct ParamGroups {
  std::vector<TensorGroup> groups;  // the optimizer's, in order
  // Per group: whether it holds head parameters (trained alone during a
  // head-only warm-up).
  std::vector<bool> heads;
};

// Two groups at the full learning rate: the weight matrices, with weight
// decay, then every other parameter (biases, norms, the class and position
// tokens; LAMB also leaves these out of its trust ratio, so they move as with
// Adam) without. Both count as head groups. Parameters whose optimized tensor
// is undefined are left out.
ParamGroups WeightDecayGroups(const VisionTransformerImpl& model,
                              const OptimizedTensor& optimized);

// LayerDecayParameterGroups(model, layer_decay) (vit_weights.h) over the
// optimized tensors: one group per (layer, weight decay, head), each at its
// layer's scale. Parameters whose optimized tensor is undefined are left out;
// their groups stay (possibly empty), so the groups keep their order.
ParamGroups LayerDecayGroups(const VisionTransformerImpl& model, double layer_decay,
                             const OptimizedTensor& optimized);

// Each parameter's ZeRO stage-3 unit, in registration order: 1 + i for the
// parameters of encoder block i ("blocks.i."), 0 for the rest of the model.
std::vector<int> BlockUnits(const VisionTransformerImpl& model);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_PARAM_GROUPS_H_
