#include "worker/trainer/model/fused_lamb.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "worker/trainer/model/fused_optimizer.h"

namespace tessera::trainer {
namespace {

using fused_optimizer::CpuLoopTakes;
using fused_optimizer::GradientMatches;
using fused_optimizer::KeyOf;
using fused_optimizer::ListKey;
using fused_optimizer::TensorLists;

// Elements per chunk of the CPU loop. The squared norms are summed per chunk
// and the chunks' sums in order, so they do not depend on the thread count.
constexpr int64_t kChunk = 32768;

void CheckOptions(const LambOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "LAMB: invalid learning rate ", o.lr());
  TORCH_CHECK(o.eps() >= 0, "LAMB: invalid eps ", o.eps());
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  TORCH_CHECK(0 <= beta1 && beta1 < 1, "LAMB: invalid beta1 ", beta1);
  TORCH_CHECK(0 <= beta2 && beta2 < 1, "LAMB: invalid beta2 ", beta2);
  TORCH_CHECK(o.weight_decay() >= 0, "LAMB: invalid weight decay ", o.weight_decay());
  TORCH_CHECK(o.max_trust_ratio() > 0, "LAMB: invalid max trust ratio ",
              o.max_trust_ratio());
  TORCH_CHECK(0 <= o.min_trust_ratio() && o.min_trust_ratio() <= o.max_trust_ratio(),
              "LAMB: invalid min trust ratio ", o.min_trust_ratio());
}

// The moments' bias corrections at `step`: 1 - beta^step, or 1 without.
struct BiasCorrection {
  double first = 1;
  double second = 1;
};

BiasCorrection BiasCorrectionAt(const LambOptions& o, int64_t step) {
  if (!o.bias_correction()) return {};
  const double t = static_cast<double>(step);
  return {1 - std::pow(std::get<0>(o.betas()), t),
          1 - std::pow(std::get<1>(o.betas()), t)};
}

// ||w|| / ||u|| clipped to [min, max], and 1 when either norm is 0.
double TrustRatio(double param_norm, double update_norm, const LambOptions& o) {
  if (param_norm == 0 || update_norm == 0) return 1;
  return std::clamp(param_norm / update_norm, o.min_trust_ratio(), o.max_trust_ratio());
}

struct Coefficients {
  float beta1;  // exp_avg * beta1 + (1 - beta1) * grad
  float one_minus_beta1;
  float beta2;  // exp_avg_sq * beta2 + (1 - beta2) * grad^2
  float one_minus_beta2;
  float inv_bias1;   // 1 / (1 - beta1^step)
  float sqrt_bias2;  // sqrt(1 - beta2^step)
  float eps;
  float weight_decay;
};

Coefficients CoefficientsAt(const LambOptions& o, int64_t step) {
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  const BiasCorrection bias = BiasCorrectionAt(o, step);
  Coefficients c;
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.inv_bias1 = static_cast<float>(1 / bias.first);
  c.sqrt_bias2 = static_cast<float>(std::sqrt(bias.second));
  c.eps = static_cast<float>(o.eps());
  c.weight_decay = static_cast<float>(o.weight_decay());
  return c;
}

// One element's update u = m_hat / (sqrt(v_hat) + eps) + wd * w, from the
// moments already advanced. Both passes call it, so they agree on u.
inline float UpdateOf(const Coefficients& c, float param, float avg, float avg_sq) {
  return avg * c.inv_bias1 / (std::sqrt(avg_sq) / c.sqrt_bias2 + c.eps) +
         c.weight_decay * param;
}

struct SquaredNorms {
  double param = 0;
  double update = 0;
};

// The first pass over elements [begin, end): advances both moments and sums
// w^2 and u^2, leaving the parameter as it is.
SquaredNorms AdvanceMoments(const Coefficients& c, const float* __restrict p,
                            const float* __restrict g, float* __restrict m,
                            float* __restrict v, int64_t begin, int64_t end) {
  double param_sq = 0;
  double update_sq = 0;
#pragma omp simd reduction(+ : param_sq, update_sq)
  for (int64_t i = begin; i < end; ++i) {
    const float grad = g[i];
    const float avg = m[i] * c.beta1 + c.one_minus_beta1 * grad;
    const float avg_sq = v[i] * c.beta2 + c.one_minus_beta2 * grad * grad;
    m[i] = avg;
    v[i] = avg_sq;
    const float update = UpdateOf(c, p[i], avg, avg_sq);
    param_sq += static_cast<double>(p[i]) * p[i];
    update_sq += static_cast<double>(update) * update;
  }
  return {param_sq, update_sq};
}

// The second pass: w -= step_size * u, with u recomputed from the moments.
void ApplyUpdate(const Coefficients& c, float step_size, float* __restrict p,
                 const float* __restrict m, const float* __restrict v, int64_t begin,
                 int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    p[i] -= step_size * UpdateOf(c, p[i], m[i], v[i]);
  }
}

// Without a trust ratio, one pass: both moments, then w -= lr * u.
void AdvanceAndApply(const Coefficients& c, float step_size, float* __restrict p,
                     const float* __restrict g, float* __restrict m, float* __restrict v,
                     int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float grad = g[i];
    const float avg = m[i] * c.beta1 + c.one_minus_beta1 * grad;
    const float avg_sq = v[i] * c.beta2 + c.one_minus_beta2 * grad * grad;
    m[i] = avg;
    v[i] = avg_sq;
    p[i] -= step_size * UpdateOf(c, p[i], avg, avg_sq);
  }
}

// The kCpuLoop path's first pass with a trust ratio: both moments, and the
// squared norms of the parameter and its update.
SquaredNorms CpuLoopMoments(const torch::Tensor& p, LambParamState& state,
                            const LambOptions& o) {
  const Coefficients c = CoefficientsAt(o, state.step());
  const float* param = p.data_ptr<float>();
  const float* grad = p.grad().data_ptr<float>();
  float* m = state.exp_avg().data_ptr<float>();
  float* v = state.exp_avg_sq().data_ptr<float>();
  const int64_t n = p.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<SquaredNorms> partial(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      partial[static_cast<size_t>(k)] =
          AdvanceMoments(c, param, grad, m, v, k * kChunk, std::min(n, (k + 1) * kChunk));
    }
  });
  SquaredNorms total;
  for (const SquaredNorms& s : partial) {
    total.param += s.param;
    total.update += s.update;
  }
  return total;
}

// The kCpuLoop path's second pass: w -= lr * ratio * u.
void CpuLoopApply(const torch::Tensor& p, const LambParamState& state,
                  const LambOptions& o, double ratio) {
  const Coefficients c = CoefficientsAt(o, state.step());
  float* param = p.data_ptr<float>();
  const float* m = state.exp_avg().data_ptr<float>();
  const float* v = state.exp_avg_sq().data_ptr<float>();
  const auto step_size = static_cast<float>(o.lr() * ratio);
  at::parallel_for(0, p.numel(), kChunk, [&](int64_t begin, int64_t end) {
    ApplyUpdate(c, step_size, param, m, v, begin, end);
  });
}

// The kCpuLoop path: one parameter's step (its state's count already
// advanced), in parallel chunks over its elements.
void CpuLoopUpdate(const torch::Tensor& p, LambParamState& state, const LambOptions& o) {
  const Coefficients c = CoefficientsAt(o, state.step());
  float* param = p.data_ptr<float>();
  const float* grad = p.grad().data_ptr<float>();
  float* m = state.exp_avg().data_ptr<float>();
  float* v = state.exp_avg_sq().data_ptr<float>();
  const int64_t n = p.numel();
  if (!o.trust_ratio()) {
    const auto lr = static_cast<float>(o.lr());
    at::parallel_for(0, n, kChunk, [&](int64_t begin, int64_t end) {
      AdvanceAndApply(c, lr, param, grad, m, v, begin, end);
    });
    return;
  }
  const SquaredNorms total = CpuLoopMoments(p, state, o);
  CpuLoopApply(p, state, o,
               TrustRatio(std::sqrt(total.param), std::sqrt(total.update), o));
}

// TrustRatio per tensor, on the norms' device: no value comes to the host.
torch::Tensor TrustRatios(const std::vector<torch::Tensor>& param_norms,
                          const std::vector<torch::Tensor>& update_norms,
                          const LambOptions& o) {
  const torch::Tensor w = torch::stack(param_norms);
  const torch::Tensor u = torch::stack(update_norms);
  // NaN or inf where a norm is 0, replaced below.
  const torch::Tensor ratio = (w / u).clamp(o.min_trust_ratio(), o.max_trust_ratio());
  return torch::where(w.gt(0).logical_and(u.gt(0)), ratio, torch::ones_like(ratio));
}

// The kForeach path over one group's parameters on one device with one dtype:
// the same update as the CPU loop, as multi-tensor ops.
void ForeachUpdate(const TensorLists& l, const LambOptions& o) {
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  at::_foreach_mul_(l.exp_avgs, beta1);
  at::_foreach_add_(l.exp_avgs, l.grads, 1 - beta1);
  at::_foreach_mul_(l.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(l.exp_avg_sqs, l.grads, l.grads, 1 - beta2);
  std::vector<torch::Tensor> denoms = at::_foreach_sqrt(l.exp_avg_sqs);
  if (o.bias_correction()) {
    std::vector<c10::Scalar> sqrt_bias2;
    for (const int64_t step : l.steps) {
      sqrt_bias2.emplace_back(std::sqrt(BiasCorrectionAt(o, step).second));
    }
    at::_foreach_div_(denoms, sqrt_bias2);
  }
  at::_foreach_add_(denoms, o.eps());
  std::vector<torch::Tensor> updates = at::_foreach_div(l.exp_avgs, denoms);
  denoms.clear();
  if (o.bias_correction()) {
    std::vector<c10::Scalar> inv_bias1;
    for (const int64_t step : l.steps) {
      inv_bias1.emplace_back(1 / BiasCorrectionAt(o, step).first);
    }
    at::_foreach_mul_(updates, inv_bias1);
  }
  if (o.weight_decay() != 0) at::_foreach_add_(updates, l.params, o.weight_decay());
  if (o.trust_ratio()) {
    const torch::Tensor ratios =
        TrustRatios(at::_foreach_norm(l.params), at::_foreach_norm(updates), o);
    // Each update times its 0-dim ratio: a broadcast, which the multi-tensor
    // kernels do not take, so LibTorch runs it per tensor (still no sync).
    at::_foreach_mul_(updates, ratios.unbind(0));
  }
  at::_foreach_add_(l.params, updates, -o.lr());
}

// One parameter's moments and update u, as the kForeach path computes them
// but for a single tensor; returns u.
torch::Tensor SingleTensorUpdate(const torch::Tensor& p, LambParamState& state,
                                 const LambOptions& o) {
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  const BiasCorrection bias = BiasCorrectionAt(o, state.step());
  const torch::Tensor& grad = p.grad();
  state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
  state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  torch::Tensor denom = state.exp_avg_sq().sqrt();
  if (o.bias_correction()) denom.div_(std::sqrt(bias.second));
  denom.add_(o.eps());
  torch::Tensor update = state.exp_avg() / denom;
  if (o.bias_correction()) update.mul_(1 / bias.first);
  if (o.weight_decay() != 0) update.add_(p, o.weight_decay());
  return update;
}

torch::Tensor SquaredNorm(const torch::Tensor& t) {
  return at::linalg_vector_norm(t, 2, c10::nullopt, false, torch::kDouble).square();
}

}  // namespace

struct FusedLamb::Deferred {
  torch::Tensor param;
  LambParamState* state = nullptr;
  const LambOptions* options = nullptr;
  bool cpu_loop = false;
  torch::Tensor update;  // kForeach: u (the CPU loop recomputes it)
};

void FusedLamb::ReducedStep() {
  std::vector<Deferred> deferred;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> rows;  // per deferred parameter: [||w||^2, ||u||^2]
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "LAMB does not support sparse gradients");
      const LambPath path = PathFor(p);
      ++last_step_counts_[static_cast<size_t>(path)];
      auto& state = fused_optimizer::FindOrCreateState<LambParamState>(state_, p);
      state.step(state.step() + 1);
      Deferred d{p, &state, &options, path == LambPath::kCpuLoop, {}};
      if (!options.trust_ratio()) {
        if (d.cpu_loop) {
          CpuLoopUpdate(p, state, options);
        } else {
          p.add_(SingleTensorUpdate(p, state, options), -options.lr());
        }
        continue;
      }
      if (d.cpu_loop) {
        const SquaredNorms norms = CpuLoopMoments(p, state, options);
        rows.push_back(torch::tensor({norms.param, norms.update}, torch::kDouble));
      } else {
        d.update = SingleTensorUpdate(p, state, options);
        rows.push_back(torch::stack({SquaredNorm(p), SquaredNorm(d.update)}));
      }
      params.push_back(p);
      deferred.push_back(std::move(d));
    }
  }
  const torch::Device device =
      rows.empty() ? torch::Device(torch::kCPU) : rows[0].device();
  for (torch::Tensor& row : rows) row = row.to(device);
  torch::Tensor squared =
      rows.empty() ? torch::zeros({0, 2}, torch::kDouble) : torch::stack(rows);
  reduction_(params, squared);
  torch::Tensor host;
  for (size_t i = 0; i < deferred.size(); ++i) {
    const Deferred& d = deferred[i];
    if (d.cpu_loop) {
      if (!host.defined()) host = squared.to(torch::kCPU).contiguous();
      const double* norms = host.data_ptr<double>() + 2 * i;
      CpuLoopApply(d.param, *d.state, *d.options,
                   TrustRatio(std::sqrt(norms[0]), std::sqrt(norms[1]), *d.options));
    } else {
      const torch::Tensor norms = squared[static_cast<int64_t>(i)].sqrt();
      const torch::Tensor ratio = TrustRatios({norms[0]}, {norms[1]}, *d.options)[0];
      d.param.add_(d.update.mul_(ratio.to(d.update.scalar_type())), -d.options->lr());
    }
  }
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_trust_ratio);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(bias_correction);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_ratio);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_trust_ratio);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, bias_correction);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, trust_ratio);
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

FusedLamb::FusedLamb(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                     LambOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups),
                              std::make_unique<LambOptions>(defaults)) {
  CheckOptions(defaults);
  for (const auto& group : param_groups_) {
    CheckOptions(static_cast<const LambOptions&>(group.options()));
  }
}

FusedLamb::FusedLamb(std::vector<torch::Tensor> params, LambOptions defaults)
    : FusedLamb({torch::optim::OptimizerParamGroup(std::move(params))},
                std::move(defaults)) {}

void FusedLamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void FusedLamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

LambPath FusedLamb::PathFor(const torch::Tensor& p) const {
  if (forced_ == LambPath::kForeach) return LambPath::kForeach;
  return GradientMatches(p) && CpuLoopTakes(p) ? LambPath::kCpuLoop : LambPath::kForeach;
}

torch::Tensor FusedLamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  last_step_counts_ = {};
  if (reduction_ != nullptr) {
    ReducedStep();
    return loss;
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    std::map<ListKey, TensorLists> lists;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "LAMB does not support sparse gradients");
      const LambPath path = PathFor(p);
      ++last_step_counts_[static_cast<size_t>(path)];
      auto& state = fused_optimizer::FindOrCreateState<LambParamState>(state_, p);
      state.step(state.step() + 1);
      if (path == LambPath::kCpuLoop) {
        CpuLoopUpdate(p, state, options);
      } else {
        lists[KeyOf(p)].Append(p, state);
      }
    }
    for (const auto& [key, operands] : lists) ForeachUpdate(operands, options);
  }
  return loss;
}

}  // namespace tessera::trainer
