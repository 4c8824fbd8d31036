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
  BucketPlan plan = AssignBuckets(numels, sizeof(float), buckets);
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
  if (options_.shard_gradients) {
    for (const Bucket& bucket : plan_.buckets) {
      const ShardRange shard =
          ShardOf(bucket.numel, communicator_.world_size(), communicator_.rank());
      gradients_.push_back(torch::zeros({shard.size()}, tensor_options));
    }
    control_word_ = torch::zeros({1}, tensor_options);
  } else {
    EnsureBucketBuffers();
  }
  pending_.resize(plan_.buckets.size());

  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(parameters_[i]);
    const int param = static_cast<int>(i);
    hooks_->keys.push_back(accumulator->add_post_hook(
        std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, param](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list& /*inputs*/) {
              OnGradientReady(param);
              return outputs;
            })));
    hooks_->accumulators.push_back(std::move(accumulator));
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < hooks_->accumulators.size(); ++i) {
    hooks_->accumulators[i]->del_post_hook(hooks_->keys[i]);
  }
  // Launched collectives write into buffers_; let them finish first.
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<PendingCollective>& pending : pending_) {
    if (pending != nullptr) pending->Wait().IgnoreError();
  }
}

void Reducer::EnsureBucketBuffers() {
  if (!buffers_.empty() || plan_.buckets.empty()) return;
  const auto tensor_options =
      torch::TensorOptions().dtype(torch::kFloat).device(parameters_[0].device());
  for (const Bucket& bucket : plan_.buckets) {
    // Bucket 0 carries the control word after its gradients (unless sharded).
    const int64_t extra = buffers_.empty() && !options_.shard_gradients ? 1 : 0;
    buffers_.push_back(torch::zeros({bucket.numel + extra}, tensor_options));
    if (!options_.shard_gradients) {
      gradients_.push_back(buffers_.back().narrow(0, 0, bucket.numel));
    }
  }
  if (!options_.shard_gradients) {
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

void Reducer::ReleaseBucketBuffers() {
  for (const at::Tensor& p : parameters_) {
    const_cast<at::Tensor&>(p).mutable_grad().reset();
  }
  views_.clear();
  buffers_.clear();
}

void Reducer::KeepShards(double factor) {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    const ShardRange shard =
        ShardOf(plan_.buckets[b].numel, communicator_.world_size(), communicator_.rank());
    at::Tensor part = buffers_[b].narrow(0, shard.begin, shard.size());
    gradients_[b].copy_(part);
    if (factor != 1.0) gradients_[b].mul_(factor);
  }
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
    EnsureBucketBuffers();
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      for (const BucketSlot& slot : plan_.buckets[b].slots) {
        buffers_[b]
            .narrow(0, slot.offset, slot.numel)
            .copy_(parameters_[static_cast<size_t>(slot.param)].detach().reshape({-1}));
      }
      absl::Status status = communicator_.Broadcast(buffers_[b], root);
      if (!status.ok()) return status;
      for (const BucketSlot& slot : plan_.buckets[b].slots) {
        at::Tensor param = parameters_[static_cast<size_t>(slot.param)].detach();
        param.copy_(buffers_[b].narrow(0, slot.offset, slot.numel).view_as(param));
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
  if (options_.shard_gradients) {
    // The shards are overwritten by the next FinishBackward; the buckets
    // come back zeroed with the next backward pass.
    ReleaseBucketBuffers();
    control_word_.zero_();
    return;
  }
  BindGradientViews();
  for (at::Tensor& buffer : buffers_) buffer.zero_();
}

void Reducer::SetControlWord(float value) {
  if (control_word_.defined()) control_word_.fill_(value);
}

void Reducer::PrepareForBackward(bool synchronize) {
  if (options_.shard_gradients) EnsureBucketBuffers();
  BindGradientViews();
  absl::MutexLock lock(&mu_);
  synchronize_ = synchronize;
  sequencer_.Reset();
  launched_in_backward_ = 0;
}

void Reducer::OnGradientReady(int param) {
  absl::MutexLock lock(&mu_);
  if (!synchronize_ || !options_.overlap) return;
  const std::vector<int> launch = sequencer_.MarkReady(param);
  launched_in_backward_ += static_cast<int>(launch.size());
  LaunchLocked(launch);
}

void Reducer::LaunchLocked(const std::vector<int>& buckets) {
  for (const int b : buckets) {
    pending_[static_cast<size_t>(b)] =
        communicator_.AllReduceSumAsync(buffers_[static_cast<size_t>(b)], b);
  }
}

absl::Status Reducer::FinishBackward(double grad_scale) {
  std::vector<std::unique_ptr<PendingCollective>> pending;
  bool synchronized = false;
  {
    absl::MutexLock lock(&mu_);
    synchronized = synchronize_;
    if (synchronized) {
      LaunchLocked(sequencer_.LaunchRemaining());
      pending = std::move(pending_);
      pending_.clear();
      pending_.resize(plan_.buckets.size());
    }
  }
  absl::Status status;
  for (std::unique_ptr<PendingCollective>& collective : pending) {
    if (collective == nullptr) continue;
    absl::Status waited = collective->Wait();
    if (status.ok()) status = std::move(waited);
  }
  if (!status.ok()) return status;
  const double factor = synchronized
                            ? grad_scale / static_cast<double>(communicator_.world_size())
                            : grad_scale;
  if (options_.shard_gradients) {
    if (synchronized) RETURN_IF_ERROR(communicator_.AllReduceSum(control_word_));
    if (buffers_.empty()) {
      // No backward pass since the last release: no gradient at all.
      for (at::Tensor& shard : gradients_) shard.zero_();
    } else {
      KeepShards(factor);
    }
    ReleaseBucketBuffers();
    return absl::OkStatus();
  }
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
