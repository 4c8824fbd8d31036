#include "worker/trainer/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera::trainer {
namespace {

bool Fusable(const torch::Tensor& p) {
  const torch::Tensor& grad = p.grad();
  return p.device().is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous() &&
         grad.defined() && !grad.is_sparse() && grad.scalar_type() == torch::kFloat &&
         grad.is_contiguous() && grad.sizes() == p.sizes();
}

// The optimizer's state map is keyed by the parameter's TensorImpl: as a
// string in LibTorch 1.x, as the pointer itself in later versions. The string
// is the pointer streamed to an ostream, as 1.x's c10::guts::to_string wrote it
// (that helper is gone from LibTorch >= 2.2), so the stock step and the
// optimizer's serialisation find the state this loop creates.
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

struct Coefficients {
  float decay;  // 1 - lr * weight_decay
  float beta1;  // exp_avg * beta1 + (1 - beta1) * grad
  float one_minus_beta1;
  float beta2;  // exp_avg_sq * beta2 + (1 - beta2) * grad^2
  float one_minus_beta2;
  float sqrt_bias2;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// One element at a time, in AdamW's order: p *= decay; m = m*b1 + (1-b1)*g;
// v = v*b2 + (1-b2)*g*g; p += -step_size * m / (sqrt(v) / sqrt(bc2) + eps).
void Update(const Coefficients& c, float* __restrict p, const float* __restrict g,
            float* __restrict m, float* __restrict v, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float grad = g[i];
    const float param = p[i] * c.decay;
    const float avg = m[i] * c.beta1 + c.one_minus_beta1 * grad;
    const float avg_sq = v[i] * c.beta2 + c.one_minus_beta2 * grad * grad;
    m[i] = avg;
    v[i] = avg_sq;
    const float denom = std::sqrt(avg_sq) / c.sqrt_bias2 + c.eps;
    p[i] = param + c.neg_step_size * (avg / denom);
  }
}

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // Anything the fused loop cannot take goes through the stock step, which
  // skips parameters without a gradient; so stash those the loop handled.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> stashed;
  fused_last_step_ = 0;
  bool any_stock = false;
  using StateMap = std::decay_t<decltype(state_)>;
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (options.amsgrad() || !Fusable(p)) {
        any_stock = true;
        continue;
      }
      const auto key = StateKey<StateMap::key_type>(p);
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto state = std::make_unique<torch::optim::AdamWParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      state.step(state.step() + 1);
      const double beta1 = std::get<0>(options.betas());
      const double beta2 = std::get<1>(options.betas());
      const double bias1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
      const double bias2 = 1 - std::pow(beta2, static_cast<double>(state.step()));
      const Coefficients c{static_cast<float>(1 - options.lr() * options.weight_decay()),
                           static_cast<float>(beta1),
                           static_cast<float>(1 - beta1),
                           static_cast<float>(beta2),
                           static_cast<float>(1 - beta2),
                           static_cast<float>(std::sqrt(bias2)),
                           static_cast<float>(options.eps()),
                           static_cast<float>(-options.lr() / bias1)};
      torch::Tensor exp_avg = state.exp_avg();
      torch::Tensor exp_avg_sq = state.exp_avg_sq();
      float* param = p.data_ptr<float>();
      const float* grad = p.grad().data_ptr<float>();
      float* m = exp_avg.data_ptr<float>();
      float* v = exp_avg_sq.data_ptr<float>();
      at::parallel_for(0, p.numel(), 32768, [&](int64_t begin, int64_t end) {
        Update(c, param, grad, m, v, begin, end);
      });
      ++fused_last_step_;
      stashed.emplace_back(p, p.grad());
    }
  }
  if (any_stock) {
    for (auto& [param, grad] : stashed) param.mutable_grad() = torch::Tensor();
    torch::optim::AdamW::step();
    for (auto& [param, grad] : stashed) param.mutable_grad() = grad;
  }
  return loss;
}

}  // namespace tessera::trainer
