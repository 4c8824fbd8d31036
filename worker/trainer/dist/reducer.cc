#include "worker/trainer/dist/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera::trainer {

// The accumulators are held so they (and the hooks on them) live as long as the
// reducer: a parameter keeps only a weak reference to its accumulator.
struct Reducer::Hooks {
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> keys;
};

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(
    const std::vector<at::Tensor>& parameters, Communicator& communicator,
    const ReducerOptions& options) {
  std::vector<int64_t> numels;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const at::Tensor& p = parameters[i];
    if (!p.defined() || p.scalar_type() != at::kFloat || !p.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", i, " must be a float32 tensor that requires a gradient"));
    }
    if (p.device() != parameters.front().device()) {
      return absl::InvalidArgumentError("parameters live on more than one device");
    }
    numels.push_back(p.numel());
  }
  BucketOptions buckets;
  buckets.bucket_cap_bytes = MebibytesToBytes(options.bucket_cap_mb);
  buckets.first_bucket_cap_bytes = MebibytesToBytes(options.first_bucket_mb);
  buckets.min_buckets = options.min_buckets;
  if (options.zero_stage == 3 && (options.units.size() != parameters.size() ||
                                  !options.unit_buffer || !options.on_bucket_reduced)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO stage 3 needs a unit for each of the ", parameters.size(),
                     " parameters, and the units' buffers"));
  }
  BucketPlan plan = options.zero_stage == 3
                        ? AssignUnitBuckets(numels, options.units)
                        : AssignBuckets(numels, sizeof(float), buckets);
  try {
    return std::unique_ptr<Reducer>(
        new Reducer(parameters, communicator, options, std::move(plan)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("setting up gradient buckets: ", e.what()));
  }
}

Reducer::Reducer(std::vector<at::Tensor> parameters, Communicator& communicator,
                 const ReducerOptions& options, BucketPlan plan)
    : options_(options),
      communicator_(communicator),
      parameters_(std::move(parameters)),
      plan_(std::move(plan)),
      hooks_(std::make_unique<Hooks>()),
      sequencer_(plan_) {
  const auto tensor_options = torch::TensorOptions()
                                  .dtype(torch::kFloat)
                                  .device(parameters_.empty() ? torch::Device(torch::kCPU)
                                                              : parameters_[0].device());
  if (!options_.gradient_views) return;  // no buffers, views or hooks
  if (options_.zero_stage > 0) control_word_ = torch::zeros({1}, tensor_options);
  if (options_.zero_stage >= 2) {
    buffers_.resize(plan_.buckets.size());
    {
      absl::MutexLock lock(&mu_);
      moved_.assign(parameters_.size(), false);
    }
    for (const Bucket& bucket : plan_.buckets) {
      const ShardRange shard =
          ShardOf(bucket.numel, communicator_.world_size(), communicator_.rank());
      gradients_.push_back(torch::zeros({shard.size()}, tensor_options));
    }
  } else {
    EnsureBucketBuffers();
  }
  pending_.resize(plan_.buckets.size());

  for (size_t i = 0; i < parameters_.size(); ++i) {
    hooks_->accumulators.emplace_back();
    hooks_->keys.push_back(0);
  }
  HookAccumulators();
}

void Reducer::HookAccumulators() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(parameters_[i]);
    if (accumulator == hooks_->accumulators[i]) continue;
    if (hooks_->accumulators[i] != nullptr) {
      hooks_->accumulators[i]->del_post_hook(hooks_->keys[i]);
    }
    const int param = static_cast<int>(i);
    hooks_->keys[i] = accumulator->add_post_hook(
        std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, param](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list& /*inputs*/) {
              OnGradientReady(param);
              return outputs;
            }));
    hooks_->accumulators[i] = std::move(accumulator);
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < hooks_->accumulators.size(); ++i) {
    if (hooks_->accumulators[i] != nullptr) {
      hooks_->accumulators[i]->del_post_hook(hooks_->keys[i]);
    }
  }
  // Launched collectives write into buffers_; let them finish first.
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<PendingCollective>& pending : pending_) {
    if (pending != nullptr) pending->Wait().IgnoreError();
  }
}

int64_t Reducer::BufferElements(size_t b) const {
  const int64_t numel = plan_.buckets[b].numel;
  if (options_.zero_stage > 0) {
    return ShardSize(numel, communicator_.world_size()) * communicator_.world_size();
  }
  return b == 0 ? numel + 1 : numel;  // bucket 0 carries the control word
}

at::Tensor Reducer::ShardView(size_t b) const {
  const ShardRange shard =
      ShardOf(plan_.buckets[b].numel, communicator_.world_size(), communicator_.rank());
  return buffers_[b].narrow(0, shard.begin, shard.size());
}

void Reducer::EnsureBucketBuffers() {
  if (!buffers_.empty() || plan_.buckets.empty()) return;
  const auto tensor_options =
      torch::TensorOptions().dtype(torch::kFloat).device(parameters_[0].device());
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    buffers_.push_back(torch::zeros({BufferElements(b)}, tensor_options));
    gradients_.push_back(options_.zero_stage == 1
                             ? ShardView(b)
                             : buffers_.back().narrow(0, 0, plan_.buckets[b].numel));
  }
  if (options_.zero_stage == 0) {
    control_word_ = buffers_.front().narrow(0, plan_.buckets.front().numel, 1);
  }
  views_.resize(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const int b = plan_.bucket_of[i];
    const BucketSlot& slot = plan_.buckets[static_cast<size_t>(b)]
                                 .slots[static_cast<size_t>(plan_.slot_of[i])];
    views_[i] = buffers_[static_cast<size_t>(b)]
                    .narrow(0, slot.offset, slot.numel)
                    .view(parameters_[i].sizes());
  }
  BindGradientViews();
}

void Reducer::BindGradientViews() {
  if (!options_.gradient_views || views_.empty()) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& grad = const_cast<at::Tensor&>(parameters_[i]).mutable_grad();
    if (grad.defined() && grad.data_ptr() == views_[i].data_ptr()) continue;
    if (grad.defined()) views_[i].copy_(grad);
    grad = views_[i];
  }
}

absl::Status Reducer::BroadcastParameters(int root) {
  if (!options_.gradient_views) {
    if (communicator_.world_size() != 1) {
      return absl::FailedPreconditionError(
          "broadcasting parameters needs the bucket buffers (gradient views)");
    }
    ZeroGradients();
    return absl::OkStatus();
  }
  try {
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      // One bucket at a time, through a buffer of its own.
      torch::Tensor flat = torch::empty(
          {plan_.buckets[b].numel},
          torch::TensorOptions().dtype(torch::kFloat).device(parameters_[0].device()));
      for (const BucketSlot& slot : plan_.buckets[b].slots) {
        flat.narrow(0, slot.offset, slot.numel)
            .copy_(parameters_[static_cast<size_t>(slot.param)].detach().reshape({-1}));
      }
      absl::Status status = communicator_.Broadcast(flat, root);
      if (!status.ok()) return status;
      for (const BucketSlot& slot : plan_.buckets[b].slots) {
        at::Tensor param = parameters_[static_cast<size_t>(slot.param)].detach();
        param.copy_(flat.narrow(0, slot.offset, slot.numel).view_as(param));
      }
    }
    ZeroGradients();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("broadcasting parameters: ", e.what()));
  }
}

void Reducer::ZeroGradients() {
  if (!options_.gradient_views) {
    gradients_.clear();
    for (const at::Tensor& p : parameters_) {
      const_cast<at::Tensor&>(p).mutable_grad().reset();
    }
    return;
  }
  if (options_.zero_stage > 0) control_word_.zero_();
  if (options_.zero_stage >= 2) {
    // The shards are overwritten by the next FinishBackward (stage 3: added
    // to, from zero); the buckets are taken in the next synchronizing pass.
    if (options_.zero_stage == 3) {
      for (at::Tensor& shard : gradients_) shard.zero_();
    }
    for (const at::Tensor& p : parameters_) {
      const_cast<at::Tensor&>(p).mutable_grad().reset();
    }
    return;
  }
  BindGradientViews();
  // A reduce-scatter leaves the other ranks' parts of its bucket undefined.
  for (at::Tensor& buffer : buffers_) buffer.zero_();
}

void Reducer::SetControlWord(float value) {
  if (control_word_.defined()) control_word_.fill_(value);
}

void Reducer::PrepareForBackward(bool synchronize) {
  if (options_.gradient_views) HookAccumulators();
  BindGradientViews();
  absl::MutexLock lock(&mu_);
  // Stage 3 reduce-scatters every pass; the last one's rest goes out in
  // FinishBackward, an earlier one's here.
  if (pass_open_) FlushPassLocked();
  synchronize_ = synchronize;
  pass_open_ = options_.zero_stage == 3;
  sequencer_.Reset();
  launched_in_backward_ = 0;
  collective_error_ = absl::OkStatus();
}

at::Tensor& Reducer::StageTwoBufferLocked(size_t b) {
  at::Tensor& buffer = buffers_[b];
  if (buffer.defined()) return buffer;
  if (options_.zero_stage == 3) {
    buffer = options_.unit_buffer(static_cast<int>(b));
    return buffer;
  }
  const int64_t elements = BufferElements(b);
  // The smallest freed buffer that holds the bucket (spares are whole).
  auto best = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->numel() >= elements &&
        (best == spare_.end() || it->numel() < best->numel())) {
      best = it;
    }
  }
  if (best != spare_.end()) {
    buffer = best->narrow(0, 0, elements);
    spare_.erase(best);
    buffer.zero_();
    return buffer;
  }
  buffer = torch::zeros(
      {elements},
      torch::TensorOptions().dtype(torch::kFloat).device(parameters_[0].device()));
  return buffer;
}

void Reducer::MoveGradientIntoBucketLocked(int param) {
  const auto i = static_cast<size_t>(param);
  at::Tensor& grad = const_cast<at::Tensor&>(parameters_[i]).mutable_grad();
  if (!grad.defined()) return;
  const int b = plan_.bucket_of[i];
  const BucketSlot& slot =
      plan_.buckets[static_cast<size_t>(b)].slots[static_cast<size_t>(plan_.slot_of[i])];
  torch::NoGradGuard no_grad;
  StageTwoBufferLocked(static_cast<size_t>(b))
      .narrow(0, slot.offset, slot.numel)
      .copy_(grad.reshape({-1}));
  grad.reset();
  if (options_.zero_stage == 3) moved_[i] = true;
}

void Reducer::RetireOldestLocked() {
  const auto b = static_cast<size_t>(in_flight_.front());
  in_flight_.erase(in_flight_.begin());
  absl::Status waited = pending_[b]->Wait();
  pending_[b].reset();
  if (waited.ok()) {
    torch::NoGradGuard no_grad;
    if (options_.zero_stage == 3) {
      gradients_[b].add_(ShardView(b));
    } else {
      gradients_[b].copy_(ShardView(b));
    }
  } else if (collective_error_.ok()) {
    collective_error_ = std::move(waited);
  }
  if (options_.zero_stage == 3) {
    buffers_[b] = at::Tensor();
    options_.on_bucket_reduced(static_cast<int>(b));
    return;
  }
  // The whole buffer, which a smaller bucket may have used a part of.
  const at::Tensor& buffer = buffers_[b];
  spare_.push_back(buffer.storage_offset() == 0 &&
                           buffer.numel() * buffer.element_size() ==
                               static_cast<int64_t>(buffer.storage().nbytes())
                       ? buffer
                       : at::empty({0}, buffer.options()).set_(buffer.storage()));
  buffers_[b] = at::Tensor();
  // As many as can be under way at once are kept; the smallest beyond that
  // is freed.
  if (spare_.size() > static_cast<size_t>(buckets_in_flight()) + 1) {
    auto smallest = spare_.begin();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->numel() < smallest->numel()) smallest = it;
    }
    spare_.erase(smallest);
  }
}

void Reducer::FlushPassLocked() {
  // Buckets whose hooks did not all run (parameters that got no gradient).
  const std::vector<int> remaining = sequencer_.LaunchRemaining();
  if (synchronize_) {
    LaunchLocked(remaining);
    while (!in_flight_.empty()) RetireOldestLocked();
  } else {
    for (const int b : remaining) options_.on_bucket_reduced(b);
  }
  sequencer_.Reset();
  pass_open_ = false;
}

void Reducer::OnGradientReady(int param) {
  absl::MutexLock lock(&mu_);
  if (options_.zero_stage == 3 && !synchronize_) {
    // An accumulation pass keeps its gradients (LibTorch's, whole, so that
    // they add up as stage 0's do); a unit whose gradients are all in is
    // done with its parameters.
    for (const int b : sequencer_.MarkReady(param)) options_.on_bucket_reduced(b);
    return;
  }
  if (!synchronize_) return;
  if (options_.zero_stage >= 2) MoveGradientIntoBucketLocked(param);
  if (!options_.overlap) return;
  const std::vector<int> launch = sequencer_.MarkReady(param);
  launched_in_backward_ += static_cast<int>(launch.size());
  LaunchLocked(launch);
}

void Reducer::LaunchLocked(const std::vector<int>& buckets) {
  for (const int b : buckets) {
    const auto i = static_cast<size_t>(b);
    if (options_.zero_stage == 0) {
      pending_[i] = communicator_.AllReduceSumAsync(buffers_[i], b);
      continue;
    }
    at::Tensor& buffer = options_.zero_stage >= 2 ? StageTwoBufferLocked(i) : buffers_[i];
    if (options_.zero_stage == 3) {
      // Slots of parameters that got no gradient still hold their values.
      torch::NoGradGuard no_grad;
      for (const BucketSlot& slot : plan_.buckets[i].slots) {
        const auto param = static_cast<size_t>(slot.param);
        if (!moved_[param]) buffer.narrow(0, slot.offset, slot.numel).zero_();
        moved_[param] = false;
      }
    }
    pending_[i] = communicator_.ReduceScatterSumAsync(buffer, b);
    if (options_.zero_stage < 2) continue;
    in_flight_.push_back(b);
    while (in_flight_.size() > static_cast<size_t>(buckets_in_flight()))
      RetireOldestLocked();
  }
  // Stage 3's pass ends with its last bucket: every unit is the model's
  // again before anything runs forward.
  if (options_.zero_stage == 3 && !buckets.empty() &&
      sequencer_.launched() == static_cast<int>(plan_.buckets.size())) {
    while (!in_flight_.empty()) RetireOldestLocked();
  }
}

absl::Status Reducer::FinishBackward(double grad_scale) {
  std::vector<std::unique_ptr<PendingCollective>> pending;
  bool synchronized = false;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    synchronized = synchronize_;
    if (synchronized) {
      if (options_.zero_stage >= 2) {
        FlushPassLocked();
        status = collective_error_;
      } else {
        LaunchLocked(sequencer_.LaunchRemaining());
        pending = std::move(pending_);
        pending_.clear();
      }
      pending_.resize(plan_.buckets.size());
    }
  }
  for (std::unique_ptr<PendingCollective>& collective : pending) {
    if (collective == nullptr) continue;
    absl::Status waited = collective->Wait();
    if (status.ok()) status = std::move(waited);
  }
  if (!status.ok()) return status;
  if (options_.zero_stage > 0 && !synchronized) {
    return absl::FailedPreconditionError(
        "ZeRO reduce-scatters the gradients: the last backward pass must synchronize");
  }
  const double factor = synchronized
                            ? grad_scale / static_cast<double>(communicator_.world_size())
                            : grad_scale;
  if (options_.zero_stage > 0) RETURN_IF_ERROR(communicator_.AllReduceSum(control_word_));
  if (!options_.gradient_views) {
    gradients_.clear();
    for (const at::Tensor& p : parameters_) {
      if (p.grad().defined()) gradients_.push_back(p.grad());
    }
  }
  if (factor != 1.0) {
    torch::NoGradGuard no_grad;
    for (at::Tensor& gradients : gradients_) gradients.mul_(factor);
  }
  return absl::OkStatus();
}

int Reducer::launched_during_backward() const {
  absl::MutexLock lock(&mu_);
  return launched_in_backward_;
}

}  // namespace tessera::trainer
