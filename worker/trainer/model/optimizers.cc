#include "worker/trainer/model/optimizers.h"

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/trainer/model/fused_adamw.h"
#include "worker/trainer/model/fused_lamb.h"

namespace tessera::trainer {
namespace {

// A state tensor fitted to `param`: its device, dtype and shape.
torch::Tensor Fitted(const at::Tensor& flat, const at::Tensor& param) {
  TORCH_CHECK(flat.numel() == param.numel(), "optimizer state of ", flat.numel(),
              " elements for a parameter of ", param.numel());
  return flat.to(param.device(), param.scalar_type()).reshape(param.sizes()).clone();
}

// The tensor named `name` in `flat`, fitted to `param`; undefined if absent.
torch::Tensor Named(const FlatParamState& flat, const std::string& name,
                    const at::Tensor& param) {
  for (const auto& [n, t] : flat.tensors) {
    if (n == name) return Fitted(t, param);
  }
  return {};
}

void Add(FlatParamState& flat, const char* name, const torch::Tensor& t) {
  if (t.defined()) flat.tensors.emplace_back(name, t.reshape({-1}));
}

// Makes one optimizer of type `Made` with options `Options` over `groups`;
// `options(scale, decay)` gives a group's options, `defaults` the optimizer's.
template <typename Made, typename Options, typename GroupOptions>
std::unique_ptr<torch::optim::Optimizer> MakeOver(std::vector<TensorGroup> groups,
                                                  GroupOptions options,
                                                  Options defaults) {
  std::vector<torch::optim::OptimizerParamGroup> made;
  made.reserve(groups.size());
  for (TensorGroup& g : groups) {
    made.emplace_back(std::move(g.tensors),
                      std::make_unique<Options>(options(g.lr_scale, g.decay)));
  }
  return std::make_unique<Made>(std::move(made), std::move(defaults));
}

// AdamW: FusedAdamW, whose state is torch::optim::AdamW's.
std::unique_ptr<torch::optim::Optimizer> MakeAdamW(std::vector<TensorGroup> groups,
                                                   const OptimizerSettings& s) {
  using Options = torch::optim::AdamWOptions;
  return MakeOver<FusedAdamW>(
      std::move(groups),
      [&](double scale, bool decay) {
        return Options(s.lr * scale)
            .weight_decay(decay ? s.weight_decay : 0.0)
            .betas({s.beta1, s.beta2})
            .eps(s.adam_eps);
      },
      Options(s.lr)
          .weight_decay(s.weight_decay)
          .betas({s.beta1, s.beta2})
          .eps(s.adam_eps));
}

FlatParamState ReadAdamW(const torch::optim::OptimizerParamState& state) {
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(state);
  FlatParamState flat;
  flat.step = s.step();
  Add(flat, "exp_avg", s.exp_avg());
  Add(flat, "exp_avg_sq", s.exp_avg_sq());
  Add(flat, "max_exp_avg_sq", s.max_exp_avg_sq());
  return flat;
}

std::unique_ptr<torch::optim::OptimizerParamState> MakeAdamWState(
    const FlatParamState& flat, const at::Tensor& param) {
  auto s = std::make_unique<torch::optim::AdamWParamState>();
  s->step(flat.step);
  s->exp_avg(Named(flat, "exp_avg", param));
  s->exp_avg_sq(Named(flat, "exp_avg_sq", param));
  s->max_exp_avg_sq(Named(flat, "max_exp_avg_sq", param));
  TORCH_CHECK(s->exp_avg().defined() && s->exp_avg_sq().defined(),
              "AdamW state without its moments");
  return s;
}

// SGD with momentum (weight decay coupled, as torch::optim::SGD's).
std::unique_ptr<torch::optim::Optimizer> MakeSgd(std::vector<TensorGroup> groups,
                                                 const OptimizerSettings& s) {
  using Options = torch::optim::SGDOptions;
  return MakeOver<torch::optim::SGD>(
      std::move(groups),
      [&](double scale, bool decay) {
        return Options(s.lr * scale)
            .momentum(s.momentum)
            .weight_decay(decay ? s.weight_decay : 0.0);
      },
      Options(s.lr).momentum(s.momentum));
}

FlatParamState ReadSgd(const torch::optim::OptimizerParamState& state) {
  const auto& s = static_cast<const torch::optim::SGDParamState&>(state);
  FlatParamState flat;
  Add(flat, "momentum_buffer", s.momentum_buffer());
  return flat;
}

std::unique_ptr<torch::optim::OptimizerParamState> MakeSgdState(
    const FlatParamState& flat, const at::Tensor& param) {
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(Named(flat, "momentum_buffer", param));
  return s;
}

int SgdStateTensors(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.momentum() != 0) return 1;
  }
  return 0;
}

// LAMB: the trust ratio on the decayed groups (weight matrices) only, unless
// lamb_trust_when_no_decay.
std::unique_ptr<torch::optim::Optimizer> MakeLamb(std::vector<TensorGroup> groups,
                                                  const OptimizerSettings& s) {
  const auto base = [&s](double lr) {
    return LambOptions(lr)
        .betas({s.beta1, s.beta2})
        .max_trust_ratio(s.lamb_max_trust)
        .min_trust_ratio(s.lamb_min_trust);
  };
  return MakeOver<FusedLamb>(
      std::move(groups),
      [&](double scale, bool decay) {
        return base(s.lr * scale)
            .weight_decay(decay ? s.weight_decay : 0.0)
            .trust_ratio(decay || s.lamb_trust_when_no_decay);
      },
      base(s.lr).weight_decay(s.weight_decay));
}

FlatParamState ReadLamb(const torch::optim::OptimizerParamState& state) {
  const auto& s = static_cast<const LambParamState&>(state);
  FlatParamState flat;
  flat.step = s.step();
  Add(flat, "exp_avg", s.exp_avg());
  Add(flat, "exp_avg_sq", s.exp_avg_sq());
  return flat;
}

std::unique_ptr<torch::optim::OptimizerParamState> MakeLambState(
    const FlatParamState& flat, const at::Tensor& param) {
  auto s = std::make_unique<LambParamState>();
  s->step(flat.step);
  s->exp_avg(Named(flat, "exp_avg", param));
  s->exp_avg_sq(Named(flat, "exp_avg_sq", param));
  TORCH_CHECK(s->exp_avg().defined() && s->exp_avg_sq().defined(),
              "LAMB state without its moments");
  return s;
}

void SetLambNormReduction(torch::optim::Optimizer& optimizer, NormReduction reduction) {
  static_cast<FusedLamb&>(optimizer).SetNormReduction(std::move(reduction));
}

int TwoMoments(const torch::optim::Optimizer& /*optimizer*/) { return 2; }

template <typename T>
bool Is(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const T*>(&optimizer) != nullptr;
}

// FusedAdamW is a torch::optim::AdamW; a stock AdamW (tests, older
// checkpoints' callers) shares its state, so the row takes both.
constexpr std::array<OptimizerKind, 3> kOptimizers = {{
    {"adamw", MakeAdamW, Is<torch::optim::AdamW>, ReadAdamW, MakeAdamWState, TwoMoments,
     nullptr, true},
    {"sgd", MakeSgd, Is<torch::optim::SGD>, ReadSgd, MakeSgdState, SgdStateTensors,
     nullptr, false},
    {"lamb", MakeLamb, Is<FusedLamb>, ReadLamb, MakeLambState, TwoMoments,
     SetLambNormReduction, false},
}};

}  // namespace

std::span<const OptimizerKind> Optimizers() { return kOptimizers; }

const OptimizerKind* FindOptimizer(std::string_view name) {
  for (const OptimizerKind& kind : kOptimizers) {
    if (name == kind.name) return &kind;
  }
  return nullptr;
}

const OptimizerKind& KindOf(const torch::optim::Optimizer& optimizer) {
  for (const OptimizerKind& kind : kOptimizers) {
    if (kind.is(optimizer)) return kind;
  }
  TORCH_CHECK(false,
              "an optimizer that tessera's table (model/optimizers.h) did not make");
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(
    std::vector<TensorGroup> groups, const OptimizerSettings& settings) {
  const OptimizerKind* kind = FindOptimizer(settings.name);
  TORCH_CHECK(kind != nullptr, "unknown optimizer \"", settings.name, "\"");
  return kind->make(std::move(groups), settings);
}

}  // namespace tessera::trainer
