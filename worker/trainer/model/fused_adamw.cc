#include "worker/trainer/model/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "worker/trainer/gpu/torch_version.h"
#include "worker/trainer/model/fused_optimizer.h"

namespace tessera::trainer {
namespace {

using fused_optimizer::CpuLoopTakes;
using fused_optimizer::GradientMatches;
using fused_optimizer::KeyOf;
using fused_optimizer::ListKey;
using fused_optimizer::TensorLists;

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

// torch::optim::AdamW's step, op for op, over lists: p *= 1 - lr * wd;
// m = m * b1 + (1 - b1) * g; v = v * b2 + (1 - b2) * g * g;
// p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
void ForeachUpdate(const TensorLists& l, const torch::optim::AdamWOptions& options) {
  const double beta1 = std::get<0>(options.betas());
  const double beta2 = std::get<1>(options.betas());
  if (options.weight_decay() != 0) {
    at::_foreach_mul_(l.params, 1 - options.lr() * options.weight_decay());
  }
  at::_foreach_mul_(l.exp_avgs, beta1);
  at::_foreach_add_(l.exp_avgs, l.grads, 1 - beta1);
  at::_foreach_mul_(l.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(l.exp_avg_sqs, l.grads, l.grads, 1 - beta2);
  std::vector<c10::Scalar> sqrt_bias2;
  std::vector<c10::Scalar> neg_step_size;
  for (const int64_t step : l.steps) {
    sqrt_bias2.emplace_back(std::sqrt(1 - std::pow(beta2, static_cast<double>(step))));
    neg_step_size.emplace_back(-options.lr() /
                               (1 - std::pow(beta1, static_cast<double>(step))));
  }
  std::vector<torch::Tensor> denoms = at::_foreach_sqrt(l.exp_avg_sqs);
  at::_foreach_div_(denoms, sqrt_bias2);
  at::_foreach_add_(denoms, options.eps());
  at::_foreach_addcdiv_(l.params, l.exp_avgs, denoms, neg_step_size);
}

void FusedUpdate(const TensorLists& l, const torch::optim::AdamWOptions& options) {
#if TESSERA_TORCH_AT_LEAST(2, 0)
  at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs,
                    /*max_exp_avg_sqs=*/{}, l.counts, options.lr(),
                    std::get<0>(options.betas()), std::get<1>(options.betas()),
                    options.weight_decay(), options.eps(), /*amsgrad=*/false,
                    /*maximize=*/false);
#else
  (void)l;
  (void)options;
  TORCH_CHECK(false, "this LibTorch has no _fused_adamw_");
#endif
}

// The fused kernel with the learning rate read from a device tensor (a
// captured step; FusedAdamW::EnableCapture).
void FusedUpdate(const TensorLists& l, const torch::Tensor& lr,
                 const torch::optim::AdamWOptions& options) {
#if TESSERA_TORCH_AT_LEAST(2, 4)
  at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs,
                    /*max_exp_avg_sqs=*/{}, l.counts, lr, std::get<0>(options.betas()),
                    std::get<1>(options.betas()), options.weight_decay(), options.eps(),
                    /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)l;
  (void)lr;
  (void)options;
  TORCH_CHECK(false, "this LibTorch's _fused_adamw_ takes no tensor learning rate");
#endif
}

// The kCpuLoop path: one parameter's update (its state's step already
// advanced), in parallel chunks over its elements.
void CpuLoopUpdate(const torch::Tensor& p, torch::optim::AdamWParamState& state,
                   const torch::optim::AdamWOptions& options) {
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
}

}  // namespace

bool FusedAdamW::HasFusedKernel(c10::DeviceType device) {
#if TESSERA_TORCH_AT_LEAST(2, 4)
  return device == c10::DeviceType::CUDA || device == c10::DeviceType::CPU;
#elif TESSERA_TORCH_AT_LEAST(2, 0)
  return device == c10::DeviceType::CUDA;
#else
  (void)device;
  return false;
#endif
}

AdamWPath FusedAdamW::PathFor(const torch::Tensor& p,
                              const torch::optim::AdamWOptions& options) const {
  if (options.amsgrad() || !GradientMatches(p)) return AdamWPath::kStock;
  // The fused kernels walk dense memory.
  const bool fused =
      HasFusedKernel(p.device().type()) && p.is_contiguous() && p.grad().is_contiguous();
  if (forced_.has_value()) {
    switch (*forced_) {
      case AdamWPath::kCpuLoop:
        return CpuLoopTakes(p) ? AdamWPath::kCpuLoop : AdamWPath::kStock;
      case AdamWPath::kFused:
        return fused ? AdamWPath::kFused : AdamWPath::kForeach;
      case AdamWPath::kForeach:
      case AdamWPath::kStock:
        return *forced_;
    }
  }
  if (p.device().is_cpu())
    return CpuLoopTakes(p) ? AdamWPath::kCpuLoop : AdamWPath::kStock;
  return fused ? AdamWPath::kFused : AdamWPath::kForeach;
}

torch::Tensor FusedAdamW::StepTensorFor(const torch::Tensor& p, int64_t step,
                                        std::vector<torch::Tensor>& to_advance) {
  StepTensor& entry = step_tensors_[p.unsafeGetTensorImpl()];
  if (device_counts_.defined()) {
    // WriteStepCounts wrote it; a count made here, inside a capture, would
    // be replayed as a constant.
    TORCH_CHECK(entry.count.defined(), "a parameter without its device step count");
    entry.value = step;
    return entry.count;
  }
  if (entry.count.defined() && entry.value == step - 1 &&
      entry.count.device() == p.device()) {
    to_advance.push_back(entry.count);
  } else {  // first step, or the state was loaded or changed behind our back
    entry.count = torch::full({}, static_cast<double>(step),
                              torch::TensorOptions(p.device()).dtype(torch::kFloat));
  }
  entry.value = step;
  return entry.count;
}

torch::optim::AdamWParamState& FusedAdamW::StateFor(const torch::Tensor& p) {
  return fused_optimizer::FindOrCreateState<torch::optim::AdamWParamState>(state_, p);
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // Anything the other paths cannot take goes through the stock step, which
  // skips parameters without a gradient; so stash those the others handled.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> stashed;
  last_step_counts_ = {};
  bool any_stock = false;
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::map<ListKey, TensorLists> fused_lists;
    std::map<ListKey, TensorLists> foreach_lists;
    std::vector<torch::Tensor> to_advance;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const AdamWPath path = PathFor(p, options);
      ++last_step_counts_[static_cast<size_t>(path)];
      if (path == AdamWPath::kStock) {
        any_stock = true;
        continue;
      }
      torch::optim::AdamWParamState& state = StateFor(p);
      state.step(state.step() + 1);
      stashed.emplace_back(p, p.grad());
      if (path == AdamWPath::kCpuLoop) {
        CpuLoopUpdate(p, state, options);
        continue;
      }
      TensorLists& lists =
          (path == AdamWPath::kFused ? fused_lists : foreach_lists)[KeyOf(p)];
      lists.Append(p, state);
      if (path == AdamWPath::kFused) {
        lists.counts.push_back(StepTensorFor(p, state.step(), to_advance));
      }
    }
    if (!to_advance.empty()) at::_foreach_add_(to_advance, 1);
    if (!lr_tensors_.empty()) {
      TORCH_CHECK(foreach_lists.empty() && !any_stock,
                  "a captured AdamW step takes only parameters of the fused kernel");
      for (const auto& [key, lists] : fused_lists) {
        FusedUpdate(lists, lr_tensors_[&group - &param_groups_[0]], options);
      }
      continue;
    }
    for (const auto& [key, lists] : fused_lists) FusedUpdate(lists, options);
    for (const auto& [key, lists] : foreach_lists) ForeachUpdate(lists, options);
  }
  if (any_stock) {
    for (auto& [param, grad] : stashed) param.mutable_grad() = torch::Tensor();
    torch::optim::AdamW::step();
    for (auto& [param, grad] : stashed) param.mutable_grad() = grad;
  }
  return loss;
}

absl::Status FusedAdamW::EnableCapture() {
  if (!TESSERA_TORCH_AT_LEAST(2, 4)) {
    return absl::FailedPreconditionError(
        "this LibTorch's fused AdamW takes no learning rate tensor (2.4 and newer do)");
  }
  std::vector<torch::Tensor> rates;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (options.amsgrad()) {
      return absl::FailedPreconditionError("amsgrad has no fused kernel to capture");
    }
    if (group.params().empty()) {
      rates.emplace_back();
      continue;
    }
    for (const torch::Tensor& p : group.params()) {
      if (!p.is_cuda() || !p.is_contiguous() ||
          p.device() != group.params()[0].device()) {
        return absl::FailedPreconditionError(
            "a captured AdamW step needs contiguous CUDA parameters, one device per "
            "group");
      }
    }
    rates.push_back(torch::full(
        {}, options.lr(),
        torch::TensorOptions(group.params()[0].device()).dtype(torch::kFloat)));
  }
  lr_tensors_ = std::move(rates);
  UseDeviceStepCounts();
  return absl::OkStatus();
}

void FusedAdamW::UseDeviceStepCounts() {
  int64_t n = 0;
  for (const auto& group : param_groups_)
    n += static_cast<int64_t>(group.params().size());
  if (n == 0) return;
  const torch::Device device = param_groups_[0].params().empty()
                                   ? torch::Device(torch::kCPU)
                                   : param_groups_[0].params()[0].device();
  device_counts_ = torch::zeros({n}, torch::TensorOptions(device).dtype(torch::kFloat));
  int64_t i = 0;
  for (const auto& group : param_groups_) {
    for (const torch::Tensor& p : group.params()) {
      StepTensor& entry = step_tensors_[p.unsafeGetTensorImpl()];
      entry.count = device_counts_.select(0, i++);
      entry.value = 0;
    }
  }
  WriteStepCounts();
}

void FusedAdamW::WriteStepCounts() {
  if (!device_counts_.defined()) return;
  std::vector<float> next;
  next.reserve(static_cast<size_t>(device_counts_.numel()));
  for (const auto& group : param_groups_) {
    for (const torch::Tensor& p : group.params()) {
      const auto& states = state_;
      const auto found = states.find(
          fused_optimizer::StateKey<std::decay_t<decltype(states)>::key_type>(p));
      const int64_t step =
          found == states.end()
              ? 0
              : static_cast<const torch::optim::AdamWParamState&>(*found->second).step();
      next.push_back(static_cast<float>(step + 1));
    }
  }
  // Every parameter steps every step in a captured run: one fill, no copy.
  if (std::all_of(next.begin(), next.end(), [&](float v) { return v == next[0]; })) {
    device_counts_.fill_(next[0]);
    return;
  }
  // Pinned where the counts are on a device: the copy does not wait for it,
  // and LibTorch's host allocator keeps the buffer until the copy has run.
  torch::Tensor host = torch::empty({static_cast<int64_t>(next.size())},
                                    torch::TensorOptions()
                                        .dtype(torch::kFloat)
                                        .pinned_memory(device_counts_.is_cuda()));
  std::copy(next.begin(), next.end(), host.data_ptr<float>());
  device_counts_.copy_(host, /*non_blocking=*/true);
}

torch::Tensor FusedAdamW::device_step_count(const torch::Tensor& p) const {
  const auto found = step_tensors_.find(p.unsafeGetTensorImpl());
  if (!device_counts_.defined() || found == step_tensors_.end()) return {};
  return found->second.count;
}

void FusedAdamW::WriteLearningRates() {
  for (size_t g = 0; g < lr_tensors_.size(); ++g) {
    if (lr_tensors_[g].defined())
      lr_tensors_[g].fill_(param_groups_[g].options().get_lr());
  }
}

void FusedAdamW::AdvanceHostSteps() {
  for (auto& group : param_groups_) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::optim::AdamWParamState& state = StateFor(p);
      state.step(state.step() + 1);
      step_tensors_[p.unsafeGetTensorImpl()].value = state.step();
    }
  }
}

}  // namespace tessera::trainer
