// Pieces shared by the fused Adam-family optimizers (FusedAdamW, FusedLamb):
// which parameters the one-pass CPU loop can take, the state map's key for a
// parameter, the per-parameter state (step, exp_avg, exp_avg_sq) created where
// the stock optimizers would look for it, and the operand lists of one
// multi-tensor (_foreach_*) call.
//
// Thread-safety: free functions and plain structs; the optimizer that calls
// them has one caller at a time.
#ifndef TESSERA_WORKER_TRAINER_MODEL_FUSED_OPTIMIZER_H_
#define TESSERA_WORKER_TRAINER_MODEL_FUSED_OPTIMIZER_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace tessera::trainer::fused_optimizer {

// Whether the gradient fits its parameter (device, dtype, shape, dense), as
// the fused loops and the multi-tensor calls assume.
inline bool GradientMatches(const torch::Tensor& p) {
  const torch::Tensor& grad = p.grad();
  return !p.is_sparse() && !grad.is_sparse() && grad.device() == p.device() &&
         grad.scalar_type() == p.scalar_type() && grad.sizes() == p.sizes() &&
         at::isFloatingType(p.scalar_type());
}

// Whether the one-pass CPU loop takes the parameter: contiguous float32 CPU
// memory, gradient too.
inline bool CpuLoopTakes(const torch::Tensor& p) {
  return p.device().is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous() &&
         p.grad().is_contiguous();
}

// The optimizer's state map is keyed by the parameter's TensorImpl: as a
// string in LibTorch 1.x, as the pointer itself in later versions. The string
// is the pointer streamed to an ostream, as 1.x's c10::guts::to_string wrote it
// (that helper is gone from LibTorch >= 2.2), so the stock step and the
// optimizer's serialisation find the state the fused loops create.
template <typename Key>
Key StateKey(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(p.unsafeGetTensorImpl());
    return key.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The parameter's state in `states` (an optimizer's state map), created with
// step 0 and zero moments on its first step. ParamState has step, exp_avg and
// exp_avg_sq (AdamWParamState, LambParamState).
template <typename ParamState, typename StateMap>
ParamState& FindOrCreateState(StateMap& states, const torch::Tensor& p) {
  const auto key = StateKey<typename StateMap::key_type>(p);
  auto found = states.find(key);
  if (found == states.end()) {
    auto state = std::make_unique<ParamState>();
    state->step(0);
    state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    found = states.emplace(key, std::move(state)).first;
  }
  return static_cast<ParamState&>(*found->second);
}

// One multi-tensor call's operands: the parameters of one group on one device
// with one dtype.
struct TensorLists {
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> grads;
  std::vector<torch::Tensor> exp_avgs;
  std::vector<torch::Tensor> exp_avg_sqs;
  std::vector<int64_t> steps;         // each parameter's step count, advanced
  std::vector<torch::Tensor> counts;  // FusedAdamW's fused kernel: the same on the device

  // Adds a parameter (its state's step already advanced); all but `counts`.
  template <typename ParamState>
  void Append(const torch::Tensor& p, const ParamState& state) {
    params.push_back(p);
    grads.push_back(p.grad());
    exp_avgs.push_back(state.exp_avg());
    exp_avg_sqs.push_back(state.exp_avg_sq());
    steps.push_back(state.step());
  }
};

using ListKey = std::tuple<int, int, int>;  // device type, index, dtype

// Which multi-tensor call a parameter joins.
inline ListKey KeyOf(const torch::Tensor& p) {
  return {static_cast<int>(p.device().type()), static_cast<int>(p.device().index()),
          static_cast<int>(p.scalar_type())};
}

}  // namespace tessera::trainer::fused_optimizer

#endif  // TESSERA_WORKER_TRAINER_MODEL_FUSED_OPTIMIZER_H_
