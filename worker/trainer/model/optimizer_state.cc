#include "worker/trainer/model/optimizer_state.h"

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "worker/trainer/model/fused_lamb.h"
#include "worker/trainer/model/fused_optimizer.h"

namespace tessera::trainer {
namespace {

using fused_optimizer::StateKey;

template <typename StateMap>
auto KeyOf(const StateMap& /*states*/, const at::Tensor& param) {
  return StateKey<typename std::decay_t<StateMap>::key_type>(param);
}

torch::optim::OptimizerParamState* FindState(const torch::optim::Optimizer& optimizer,
                                             const at::Tensor& param) {
  const auto& states = optimizer.state();
  const auto found = states.find(KeyOf(states, param));
  return found == states.end() ? nullptr : found->second.get();
}

// A state tensor fitted to `param`: its device, dtype and shape.
torch::Tensor Fitted(const at::Tensor& flat, const at::Tensor& param) {
  TORCH_CHECK(flat.numel() == param.numel(), "optimizer state of ", flat.numel(),
              " elements for a parameter of ", param.numel());
  return flat.to(param.device(), param.scalar_type()).reshape(param.sizes()).clone();
}

// The tensor named `name` in `state`, fitted to `param`; undefined if absent.
torch::Tensor Named(const FlatParamState& state, const std::string& name,
                    const at::Tensor& param) {
  for (const auto& [n, t] : state.tensors) {
    if (n == name) return Fitted(t, param);
  }
  return {};
}

void Store(torch::optim::Optimizer& optimizer, const at::Tensor& param,
           std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto& states = optimizer.state();
  states[KeyOf(states, param)] = std::move(state);
}

}  // namespace

std::optional<FlatParamState> ReadFlatState(const torch::optim::Optimizer& optimizer,
                                            const at::Tensor& param) {
  torch::optim::OptimizerParamState* found = FindState(optimizer, param);
  if (found == nullptr) return std::nullopt;
  FlatParamState flat;
  auto add = [&](const char* name, const torch::Tensor& t) {
    if (t.defined()) flat.tensors.emplace_back(name, t.reshape({-1}));
  };
  if (dynamic_cast<const FusedLamb*>(&optimizer) != nullptr) {
    const auto& s = static_cast<const LambParamState&>(*found);
    flat.step = s.step();
    add("exp_avg", s.exp_avg());
    add("exp_avg_sq", s.exp_avg_sq());
  } else if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found);
    flat.step = s.step();
    add("exp_avg", s.exp_avg());
    add("exp_avg_sq", s.exp_avg_sq());
    add("max_exp_avg_sq", s.max_exp_avg_sq());
  } else if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) {
    const auto& s = static_cast<const torch::optim::SGDParamState&>(*found);
    add("momentum_buffer", s.momentum_buffer());
  } else {
    TORCH_CHECK(false, "no flat state for this optimizer");
  }
  return flat;
}

void WriteFlatState(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                    const FlatParamState& state) {
  if (dynamic_cast<const FusedLamb*>(&optimizer) != nullptr) {
    auto s = std::make_unique<LambParamState>();
    s->step(state.step);
    s->exp_avg(Named(state, "exp_avg", param));
    s->exp_avg_sq(Named(state, "exp_avg_sq", param));
    TORCH_CHECK(s->exp_avg().defined() && s->exp_avg_sq().defined(),
                "LAMB state without its moments");
    Store(optimizer, param, std::move(s));
  } else if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(state.step);
    s->exp_avg(Named(state, "exp_avg", param));
    s->exp_avg_sq(Named(state, "exp_avg_sq", param));
    s->max_exp_avg_sq(Named(state, "max_exp_avg_sq", param));
    TORCH_CHECK(s->exp_avg().defined() && s->exp_avg_sq().defined(),
                "AdamW state without its moments");
    Store(optimizer, param, std::move(s));
  } else if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(Named(state, "momentum_buffer", param));
    Store(optimizer, param, std::move(s));
  } else {
    TORCH_CHECK(false, "no flat state for this optimizer");
  }
}

int StateTensorsPerElement(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const FusedLamb*>(&optimizer) != nullptr) return 2;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) return 2;
  if (const auto* sgd = dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    for (const auto& group : sgd->param_groups()) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      if (o.momentum() != 0) return 1;
    }
  }
  return 0;
}

}  // namespace tessera::trainer
