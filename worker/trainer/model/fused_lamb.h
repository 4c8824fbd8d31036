// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"): Adam
// moments with a layer-wise trust ratio, for large batches. Per parameter
// tensor w, at step t:
//   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
//   u = m_hat / (sqrt(v_hat) + eps) + weight_decay w
//   w -= lr * r * u,   r = clamp(||w|| / ||u||, 0, max_trust_ratio)
// where m_hat = m / (1 - beta1^t) and v_hat = v / (1 - beta2^t) with bias
// correction (the default) and m, v without, and r = 1 when either norm is 0.
// A group with trust_ratio(false) skips the ratio (r = 1): with weight_decay 0
// its parameters move exactly as Adam's. The trainer puts biases, norms and the
// class/position tokens in such a group (WeightDecayGroups in param_groups.h).
//
// Each parameter with a gradient takes one of two paths (LambPath):
//  - kCpuLoop: contiguous float32 CPU parameters with a matching gradient. One
//    pass over the parameter updates both moments and sums ||w||^2 and ||u||^2
//    (u is not stored); a second pass recomputes u and applies lr * r * u. With
//    trust_ratio(false) the update is applied in the first pass.
//  - kForeach: everything else (CUDA parameters in particular): the _foreach_*
//    ops over the parameters of one group, device and dtype, with the trust
//    ratios from _foreach_norm computed on the device, so a step never reads
//    a norm back to the host or waits for the GPU.
// Parameters split across ranks (ZeRO, dist/zero_optimizer.h) need the trust
// ratio of the whole parameter: with a norm reduction set, a step first
// advances every parameter's moments and sums its ||w||^2 and ||u||^2, hands
// them to the reduction once (on every rank, even with none), which replaces
// them with the whole parameters' sums, and then applies the updates.
//
// The state is LambParamState (step, exp_avg, exp_avg_sq) per parameter; save()
// and load() write and read it with the group options, as the stock optimizers
// do, so checkpoint.cc's files hold a LAMB run as they hold an AdamW one.
//
// Thread-safety: as the torch::optim optimizers (one caller at a time).
#ifndef TESSERA_WORKER_TRAINER_MODEL_FUSED_LAMB_H_
#define TESSERA_WORKER_TRAINER_MODEL_FUSED_LAMB_H_

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

namespace tessera::trainer {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  using betas_t = std::tuple<double, double>;

  explicit LambOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  // Decoupled: added to the update, so the trust ratio scales it too.
  TORCH_ARG(double, weight_decay) = 0.0;
  // The trust ratio's upper clip (> 0).
  TORCH_ARG(double, max_trust_ratio) = 10.0;
  // The trust ratio's lower clip (>= 0, <= max_trust_ratio): DeepSpeed floors it
  // at 0.01, timm and the paper do not. Not in the serialized options, which
  // older archives lack; Tessera's checkpoints keep the run's settings.
  TORCH_ARG(double, min_trust_ratio) = 0.0;
  // Divide the moments by 1 - beta^t.
  TORCH_ARG(bool, bias_correction) = true;
  // false: this group's parameters are excluded from the trust ratio (r = 1).
  TORCH_ARG(bool, trust_ratio) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState
    : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

enum class LambPath { kCpuLoop = 0, kForeach = 1 };

class FusedLamb final : public torch::optim::Optimizer {
 public:
  // Throws c10::Error for an invalid default option (negative lr, eps or
  // weight decay, a beta outside [0, 1), max_trust_ratio <= 0).
  explicit FusedLamb(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                     LambOptions defaults = LambOptions());
  explicit FusedLamb(std::vector<torch::Tensor> params,
                     LambOptions defaults = LambOptions());

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Sends every parameter down `path` whatever its device (tests run the
  // device path on CPU tensors this way); kCpuLoop still takes only the
  // parameters it can, the others go to kForeach. nullopt: the choice above.
  void ForcePath(std::optional<LambPath> path) { forced_ = path; }

  // Parameters updated by `path` in the last step: for tests and logs.
  int last_step_count(LambPath path) const {
    return last_step_counts_[static_cast<size_t>(path)];
  }

  // Called once per step with the trust-ratio parameters the step updates
  // and their squared norms as a float64 [k, 2] tensor (||w||^2, ||u||^2 per
  // row); replaces each row with the sums over every part of that parameter.
  // Errors are thrown (c10::Error) and leave the step.
  using NormReduction = std::function<void(const std::vector<torch::Tensor>& params,
                                           torch::Tensor& squared_norms)>;
  // nullptr: each tensor is a whole parameter (the default).
  void SetNormReduction(NormReduction reduction) { reduction_ = std::move(reduction); }

 private:
  struct Deferred;  // a trust-ratio parameter awaiting its reduced norms

  LambPath PathFor(const torch::Tensor& p) const;
  // step() with a norm reduction.
  void ReducedStep();

  std::optional<LambPath> forced_;
  std::array<int, 2> last_step_counts_{};
  NormReduction reduction_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_FUSED_LAMB_H_
