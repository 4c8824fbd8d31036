// Tessera's optimizers in one table: what each is called, how it is made over
// groups of tensors, its per-parameter state in the flat form that checkpoints
// and ZeRO's shards use (optimizer_state.h), what ZeRO must give it, and
// whether a captured CUDA-graph step can run it (gpu/cuda_graph.h). Adding an
// optimizer is one row here plus its name in common/trainer_choices.h, which
// the coordinator checks specs against without linking LibTorch (a test keeps
// the two lists equal).
//
//   name   made as                 flat state                          ZeRO needs
//   captured adamw  FusedAdamW              step, exp_avg, exp_avg_sq           nothing
//   yes
//                                  (+ max_exp_avg_sq with amsgrad)
//   sgd    torch::optim::SGD       momentum_buffer (momentum != 0)     nothing no lamb
//   FusedLamb               step, exp_avg, exp_avg_sq           whole-tensor      no
//                                                                      norms reduced
//
// Groups: each TensorGroup becomes one optimizer group at lr x lr_scale, with
// the run's weight decay where `decay` is set and none elsewhere. LAMB applies
// its trust ratio to the decayed groups only (weight matrices), so biases,
// norms and tokens move as with Adam, unless lamb_trust_when_no_decay (as
// DeepSpeed's LAMB does with every group).
//
// Thread-safety: the table is immutable; the optimizers it makes have one
// caller at a time, as LibTorch's.
#ifndef TESSERA_WORKER_TRAINER_MODEL_OPTIMIZERS_H_
#define TESSERA_WORKER_TRAINER_MODEL_OPTIMIZERS_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "worker/trainer/model/optimizer_state.h"

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace tessera::trainer {

// The run's optimizer settings (TrainerOptions' optimizer keys).
struct OptimizerSettings {
  std::string name = "adamw";
  double lr = 1e-3;            // the peak rate; groups scale it
  double weight_decay = 0.05;  // decoupled for AdamW and LAMB
  double momentum = 0.9;       // SGD only
  // The moments' decay rates, of AdamW and LAMB alike.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double adam_eps = 1e-8;  // AdamW only; LAMB keeps its 1e-6
  // LAMB's trust ratio: clipped to [lamb_min_trust, lamb_max_trust], on the
  // decayed groups only unless lamb_trust_when_no_decay.
  double lamb_max_trust = 10.0;
  double lamb_min_trust = 0.0;
  bool lamb_trust_when_no_decay = false;
};

// One optimizer group: the tensors it updates (parameters, or ZeRO's pieces
// of them), its learning-rate scale (layer-wise decay) and whether weight
// decay (and LAMB's trust ratio) applies.
struct TensorGroup {
  std::vector<at::Tensor> tensors;
  double lr_scale = 1.0;
  bool decay = true;
};

// A parameter split over ranks needs whole-parameter norms (LAMB's trust
// ratio): called once per step with the tensors stepped and their squared
// norms as a float64 [k, 2] tensor, it replaces each row with the sums over
// every part of that parameter (FusedLamb::NormReduction).
using NormReduction = std::function<void(const std::vector<at::Tensor>& tensors,
                                         at::Tensor& squared_norms)>;

struct OptimizerKind {
  const char* name;  // as in --optimizer and the job spec
  // The optimizer over `groups` (throws c10::Error for invalid settings).
  std::unique_ptr<torch::optim::Optimizer> (*make)(std::vector<TensorGroup> groups,
                                                   const OptimizerSettings& settings);
  // Whether `optimizer` was made by this row.
  bool (*is)(const torch::optim::Optimizer& optimizer);
  // One parameter's state, flattened (views); and a state made from a flat
  // one, its tensors fitted to `param` (throws when they do not fit).
  FlatParamState (*read_state)(const torch::optim::OptimizerParamState& state);
  std::unique_ptr<torch::optim::OptimizerParamState> (*make_state)(
      const FlatParamState& flat, const at::Tensor& param);
  // State tensors kept per parameter element once it has stepped.
  int (*state_tensors_per_element)(const torch::optim::Optimizer& optimizer);
  // Null for element-wise optimizers; else hands the optimizer the reduction
  // that ZeRO's sharded parameters need.
  void (*set_norm_reduction)(torch::optim::Optimizer& optimizer, NormReduction reduction);
  // Whether a CUDA graph can capture its step (FusedAdamW::EnableCapture).
  bool capturable;
};

// Every row, in --optimizer's order.
std::span<const OptimizerKind> Optimizers();

// The row called `name`; nullptr for an unknown name.
const OptimizerKind* FindOptimizer(std::string_view name);

// The row that made `optimizer`; throws c10::Error for an optimizer not made
// by the table.
const OptimizerKind& KindOf(const torch::optim::Optimizer& optimizer);

// FindOptimizer(settings.name)'s optimizer over `groups`; throws c10::Error
// for an unknown name.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(std::vector<TensorGroup> groups,
                                                       const OptimizerSettings& settings);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_OPTIMIZERS_H_
