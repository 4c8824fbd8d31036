#include "worker/trainer/dist/zero_optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/model/fused_lamb.h"

namespace tessera::trainer {

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    int stage, const std::vector<at::Tensor>& parameters, Reducer& reducer,
    Communicator& communicator) {
  if (stage != 1 && stage != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO stage ", stage, ": the sharded stages are 1 and 2"));
  }
  if (reducer.gradient_buffers().size() != reducer.plan().buckets.size() ||
      reducer.zero_stage() != stage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZeRO stage ", stage, " needs a reducer of the same stage with gradient views"));
  }
  try {
    return std::unique_ptr<ZeroOptimizer>(
        new ZeroOptimizer(stage, parameters, reducer, communicator));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("setting up ZeRO shards: ", e.what()));
  }
}

ZeroOptimizer::ZeroOptimizer(int stage, std::vector<at::Tensor> parameters,
                             Reducer& reducer, Communicator& communicator)
    : stage_(stage),
      parameters_(std::move(parameters)),
      reducer_(reducer),
      communicator_(communicator),
      pieces_(AssignShardPieces(reducer.plan(), communicator.world_size(),
                                communicator.rank())) {
  const int world = communicator_.world_size();
  const BucketPlan& plan = reducer_.plan();
  slots_.resize(parameters_.size());
  torch::NoGradGuard no_grad;
  // Bucket by bucket, so that at most one bucket's parameters exist twice.
  for (const Bucket& bucket : plan.buckets) {
    shards_.push_back(ShardOf(bucket.numel, world, communicator_.rank()));
    flat_.push_back(torch::zeros({ShardSize(bucket.numel, world) * world},
                                 parameters_[0].options().requires_grad(false)));
    for (const BucketSlot& slot : bucket.slots) {
      const auto i = static_cast<size_t>(slot.param);
      slots_[i] =
          flat_.back().narrow(0, slot.offset, slot.numel).view(parameters_[i].sizes());
    }
    BindParameters();
  }
  piece_of_param_.assign(parameters_.size(), -1);
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = pieces_[j];
    piece_values_.push_back(flat_[static_cast<size_t>(piece.bucket)].narrow(
        0, piece.bucket_offset, piece.numel));
    piece_of_param_[static_cast<size_t>(piece.param)] = static_cast<int>(j);
  }
}

ZeroOptimizer::~ZeroOptimizer() = default;

at::Tensor ZeroOptimizer::PieceOf(int param) const {
  const int j = piece_of_param_[static_cast<size_t>(param)];
  return j < 0 ? at::Tensor() : piece_values_[static_cast<size_t>(j)];
}

void ZeroOptimizer::Attach(torch::optim::Optimizer& optimizer) {
  optimizer_ = &optimizer;
  if (auto* lamb = dynamic_cast<FusedLamb*>(&optimizer)) {
    lamb->SetNormReduction(
        [this](const std::vector<torch::Tensor>& pieces, torch::Tensor& squared) {
          ReduceSquaredNorms(pieces, squared);
        });
  }
}

at::Tensor ZeroOptimizer::GradientShard(size_t b) const {
  return reducer_.gradient_buffers()[b];  // the reducer's shard of bucket b
}

void ZeroOptimizer::BindParameters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& slot = slots_[i];
    if (!slot.defined()) continue;  // a later bucket's, not made yet
    at::Tensor& param = const_cast<at::Tensor&>(parameters_[i]);
    if (param.data_ptr() == slot.data_ptr() &&
        param.storage().is_alias_of(slot.storage())) {
      continue;
    }
    slot.copy_(param.detach());
    param.set_data(slot);
  }
}

void ZeroOptimizer::BindPieces() {
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = pieces_[j];
    const auto b = static_cast<size_t>(piece.bucket);
    piece_values_[j].mutable_grad() =
        GradientShard(b).narrow(0, piece.bucket_offset - shards_[b].begin, piece.numel);
  }
}

absl::StatusOr<bool> ZeroOptimizer::AnyNonFinite() {
  torch::NoGradGuard no_grad;
  torch::Tensor total =
      torch::zeros({1}, torch::TensorOptions()
                            .dtype(torch::kDouble)
                            .device(flat_.empty() ? torch::kCPU : flat_[0].device()));
  for (size_t b = 0; b < shards_.size(); ++b) {
    total.add_(GradientShard(b).sum(torch::kDouble));
  }
  RETURN_IF_ERROR(communicator_.AllReduceSum(total));
  return !std::isfinite(total.item<double>());
}

absl::Status ZeroOptimizer::ClipGradients(double max_norm) {
  torch::NoGradGuard no_grad;
  if (flat_.empty()) return absl::OkStatus();
  torch::Tensor squares = torch::zeros(
      {1}, torch::TensorOptions().dtype(torch::kDouble).device(flat_[0].device()));
  for (size_t b = 0; b < shards_.size(); ++b) {
    squares.add_(GradientShard(b).square().sum(torch::kDouble));
  }
  RETURN_IF_ERROR(communicator_.AllReduceSum(squares));
  const torch::Tensor factor =
      (max_norm / (squares.sqrt() + 1e-6)).clamp_max(1.0).to(torch::kFloat);
  for (size_t b = 0; b < shards_.size(); ++b) GradientShard(b).mul_(factor);
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::Step(double clip_grad_norm) {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("ZeRO step without an attached optimizer");
  }
  try {
    BindParameters();
    BindPieces();
    if (clip_grad_norm > 0) RETURN_IF_ERROR(ClipGradients(clip_grad_norm));
    norm_status_ = absl::OkStatus();
    optimizer_->step();
  } catch (const std::exception& e) {
    if (!norm_status_.ok()) return norm_status_;
    return absl::InternalError(absl::StrCat("ZeRO optimizer step: ", e.what()));
  }
  return AllGatherParameters();
}

absl::Status ZeroOptimizer::AllGatherParameters() {
  torch::NoGradGuard no_grad;
  // Every bucket at once: the transfers of one overlap the others'.
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (size_t b = 0; b < flat_.size(); ++b) {
    pending.push_back(communicator_.AllGatherAsync(flat_[b], static_cast<int>(b)));
  }
  absl::Status status;
  for (std::unique_ptr<PendingCollective>& collective : pending) {
    absl::Status waited = collective->Wait();
    if (status.ok()) status = std::move(waited);
  }
  return status;
}

void ZeroOptimizer::ReduceSquaredNorms(const std::vector<at::Tensor>& pieces,
                                       at::Tensor& squared) {
  torch::NoGradGuard no_grad;
  const torch::Device device =
      flat_.empty() ? torch::Device(torch::kCPU) : flat_[0].device();
  torch::Tensor whole =
      torch::zeros({static_cast<int64_t>(parameters_.size()), 2},
                   torch::TensorOptions().dtype(torch::kDouble).device(device));
  std::vector<int64_t> rows;
  for (const at::Tensor& piece : pieces) {
    int param = -1;
    for (size_t j = 0; j < piece_values_.size() && param < 0; ++j) {
      if (piece_values_[j].unsafeGetTensorImpl() == piece.unsafeGetTensorImpl()) {
        param = pieces_[j].param;
      }
    }
    TORCH_CHECK(param >= 0, "LAMB stepped a tensor that is not a ZeRO piece");
    rows.push_back(param);
  }
  torch::Tensor index = torch::tensor(rows, torch::kLong).to(device);
  if (!rows.empty()) whole.index_add_(0, index, squared.to(device));
  absl::Status reduced = communicator_.AllReduceSum(whole);
  if (!reduced.ok()) {
    norm_status_ = reduced;
    TORCH_CHECK(false, "reducing LAMB's norms: ", std::string(reduced.message()));
  }
  if (!rows.empty()) squared = whole.index_select(0, index).to(squared.device());
}

int64_t ZeroOptimizer::state_elements() const {
  int64_t n = 0;
  for (const ShardPiece& piece : pieces_) n += piece.numel;
  return n;
}

int64_t ZeroOptimizer::gradient_bytes() const {
  int64_t elements = 0;
  for (size_t b = 0; b < shards_.size(); ++b) {
    elements += stage_ == 2 ? shards_[b].size() : flat_[b].numel();
  }
  return elements * static_cast<int64_t>(sizeof(float));
}

std::vector<ZeroPieceState> ZeroOptimizer::ExportState() const {
  std::vector<ZeroPieceState> out;
  if (optimizer_ == nullptr) return out;
  for (size_t j = 0; j < pieces_.size(); ++j) {
    std::optional<FlatParamState> state = ReadFlatState(*optimizer_, piece_values_[j]);
    if (!state.has_value()) continue;
    for (auto& [name, tensor] : state->tensors) {
      tensor = tensor.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
    }
    out.push_back(
        ZeroPieceState{pieces_[j].param, pieces_[j].param_offset, *std::move(state)});
  }
  return out;
}

void ZeroOptimizer::ImportState(const std::vector<std::optional<FlatParamState>>& whole) {
  TORCH_CHECK(optimizer_ != nullptr, "ZeRO state import without an optimizer");
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = pieces_[j];
    const std::optional<FlatParamState>& state = whole[static_cast<size_t>(piece.param)];
    if (!state.has_value()) continue;
    FlatParamState part;
    part.step = state->step;
    for (const auto& [name, tensor] : state->tensors) {
      part.tensors.emplace_back(name, tensor.narrow(0, piece.param_offset, piece.numel));
    }
    WriteFlatState(*optimizer_, piece_values_[j], part);
  }
}

}  // namespace tessera::trainer
