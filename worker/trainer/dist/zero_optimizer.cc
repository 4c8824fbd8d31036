#include "worker/trainer/dist/zero_optimizer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/model/optimizers.h"

namespace tessera::trainer {

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    int stage, const std::vector<at::Tensor>& parameters, Reducer& reducer,
    Communicator& communicator) {
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO stage ", stage, ": the sharded stages are 1, 2 and 3"));
  }
  if (stage == 3 && reducer.plan().buckets.size() < 1) {
    return absl::InvalidArgumentError("ZeRO stage 3 needs the model's units");
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

// Stage 3's flat buffers keep their tensor (and the parameters their views)
// while the memory under them comes and goes, as FSDP frees a FlatParameter's
// storage. The memory is reused from unit to unit: a unit gathered and freed
// twice a step would otherwise leave the heap in holes that stay resident.
class UnitMemory : public std::enable_shared_from_this<UnitMemory> {
 public:
  explicit UnitMemory(at::Allocator* allocator) : allocator_(allocator) {}

  // Memory of at least `bytes`, given back to the pool when the DataPtr goes.
  at::DataPtr Take(size_t bytes, at::Device device) {
    auto lease = std::make_unique<Lease>();
    lease->pool = shared_from_this();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes))
          best = it;
      }
      if (best != free_.end()) {
        lease->block = std::move(*best);
        free_.erase(best);
      }
    }
    if (lease->block.memory.get() == nullptr) {
      lease->block.memory = allocator_->allocate(bytes);
      lease->block.bytes = bytes;
      std::lock_guard<std::mutex> lock(mu_);
      held_ += bytes;
      peak_ = std::max(peak_, held_);
    }
    void* data = lease->block.memory.get();
    return at::DataPtr(data, lease.release(), &GiveBack, device);
  }

  // The most bytes its blocks (in use and kept) held at once.
  size_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  struct Block {
    at::DataPtr memory;
    size_t bytes = 0;
  };
  struct Lease {
    std::shared_ptr<UnitMemory> pool;
    Block block;
  };
  // Blocks kept for reuse: a unit gathered, the next prefetched, and one
  // each for the backward's pair.
  static constexpr size_t kKept = 4;

  static void GiveBack(void* context) {
    std::unique_ptr<Lease> lease(static_cast<Lease*>(context));
    UnitMemory& pool = *lease->pool;
    std::lock_guard<std::mutex> lock(pool.mu_);
    if (pool.free_.size() < kKept) {
      pool.free_.push_back(std::move(lease->block));
    } else {
      pool.held_ -= lease->block.bytes;  // freed with the lease
    }
  }

  at::Allocator* const allocator_;
  mutable std::mutex mu_;
  std::vector<Block> free_;
  size_t held_ = 0;
  size_t peak_ = 0;
};

namespace {

void FreeMemory(const at::Tensor& flat) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  storage->set_data_ptr(at::DataPtr(nullptr, flat.device()));
  storage->set_nbytes(0);
}

void GiveMemory(const at::Tensor& flat, UnitMemory& pool) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  storage->set_data_ptr(pool.Take(bytes, flat.device()));
  storage->set_nbytes(bytes);
}

}  // namespace

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
    const ShardRange shard = ShardOf(bucket.numel, world, communicator_.rank());
    const int64_t shard_size = ShardSize(bucket.numel, world);
    shards_.push_back(shard);
    flat_.push_back(torch::zeros({shard_size * world},
                                 parameters_[0].options().requires_grad(false)));
    for (const BucketSlot& slot : bucket.slots) {
      const auto i = static_cast<size_t>(slot.param);
      slots_[i] =
          flat_.back().narrow(0, slot.offset, slot.numel).view(parameters_[i].sizes());
      BindParameter(i);
    }
    if (stage_ == 3) {
      shard_.push_back(flat_.back().narrow(0, shard.begin, shard_size).clone());
      FreeMemory(flat_.back());
      if (unit_memory_ == nullptr) {
        unit_memory_ = std::make_shared<UnitMemory>(flat_.back().storage().allocator());
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    gathered_.assign(flat_.size(), false);
    lent_.assign(flat_.size(), false);
    gathering_.resize(flat_.size());
  }
  piece_of_param_.assign(parameters_.size(), -1);
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = pieces_[j];
    const auto b = static_cast<size_t>(piece.bucket);
    piece_values_.push_back(
        stage_ == 3
            ? shard_[b].narrow(0, piece.bucket_offset - shards_[b].begin, piece.numel)
            : flat_[b].narrow(0, piece.bucket_offset, piece.numel));
    piece_of_param_[static_cast<size_t>(piece.param)] = static_cast<int>(j);
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  absl::MutexLock lock(&mu_);
  for (size_t b = 0; b < gathered_.size(); ++b) ReleaseLocked(b);
}

at::Tensor ZeroOptimizer::PieceOf(int param) const {
  const int j = piece_of_param_[static_cast<size_t>(param)];
  return j < 0 ? at::Tensor() : piece_values_[static_cast<size_t>(j)];
}

void ZeroOptimizer::Attach(torch::optim::Optimizer& optimizer) {
  optimizer_ = &optimizer;
  const OptimizerKind& kind = KindOf(optimizer);
  if (kind.set_norm_reduction != nullptr) {
    kind.set_norm_reduction(optimizer, [this](const std::vector<torch::Tensor>& pieces,
                                              torch::Tensor& squared) {
      ReduceSquaredNorms(pieces, squared);
    });
  }
}

at::Tensor ZeroOptimizer::GradientShard(size_t b) const {
  return reducer_.gradient_buffers()[b];  // the reducer's shard of bucket b
}

bool ZeroOptimizer::BindParameter(size_t i) {
  const at::Tensor& slot = slots_[i];
  at::Tensor& param = const_cast<at::Tensor&>(parameters_[i]);
  if (param.storage().is_alias_of(slot.storage()) &&
      param.storage_offset() == slot.storage_offset()) {
    return false;
  }
  torch::NoGradGuard no_grad;
  slot.copy_(param.detach());
  param.set_data(slot);
  return true;
}

void ZeroOptimizer::BindParameters() {
  if (stage_ == 3) {
    absl::MutexLock lock(&mu_);
    BindShardedParametersLocked();
    return;
  }
  for (size_t i = 0; i < parameters_.size(); ++i) BindParameter(i);
}

void ZeroOptimizer::BindShardedParametersLocked() {
  const BucketPlan& plan = reducer_.plan();
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    bool replaced = false;
    for (const BucketSlot& slot : plan.buckets[b].slots) {
      const at::Tensor& param = parameters_[static_cast<size_t>(slot.param)];
      replaced = replaced || !param.storage().is_alias_of(flat_[b].storage());
    }
    if (!replaced) continue;
    // The unit's current values, then the replaced parameters' own on top.
    const bool was_gathered = gathered_[b];
    GatherLocked(b, /*wait=*/true);
    torch::NoGradGuard no_grad;
    for (const BucketSlot& slot : plan.buckets[b].slots) {
      BindParameter(static_cast<size_t>(slot.param));
    }
    shard_[b].copy_(flat_[b].narrow(0, shards_[b].begin, shard_[b].numel()));
    if (!was_gathered) ReleaseLocked(b);
  }
}

void ZeroOptimizer::GatherLocked(size_t b, bool wait) {
  TORCH_CHECK(!lent_[b], "ZeRO stage 3: unit bucket ", b,
              " still holds its gradients (its reduce-scatter was not finished)");
  if (!gathered_[b]) {
    torch::NoGradGuard no_grad;
    GiveMemory(flat_[b], *unit_memory_);
    flat_[b].narrow(0, shards_[b].begin, shard_[b].numel()).copy_(shard_[b]);
    gathered_[b] = true;
    gathering_[b] = communicator_.AllGatherAsync(flat_[b], static_cast<int>(b));
  }
  if (wait) WaitGatheredLocked(b);
}

void ZeroOptimizer::WaitGatheredLocked(size_t b) {
  if (gathering_[b] == nullptr) return;
  const absl::Status status = gathering_[b]->Wait();
  gathering_[b].reset();
  TORCH_CHECK(status.ok(), "ZeRO stage 3: gathering the parameters of unit bucket ", b,
              ": ", std::string(status.message()));
}

void ZeroOptimizer::ReleaseLocked(size_t b) {
  if (!gathered_[b]) return;
  if (gathering_[b] != nullptr) {
    // The transfer writes into the memory: it must end first.
    gathering_[b]->Wait().IgnoreError();
    gathering_[b].reset();
  }
  FreeMemory(flat_[b]);
  gathered_[b] = false;
}

void ZeroOptimizer::BeforeForward() {
  absl::MutexLock lock(&mu_);
  BindShardedParametersLocked();
  GatherLocked(RootBucket(), /*wait=*/true);
  if (flat_.size() > 1) GatherLocked(BlockBucket(0), /*wait=*/false);
}

void ZeroOptimizer::BeforeBlock(int block) {
  absl::MutexLock lock(&mu_);
  GatherLocked(BlockBucket(block), /*wait=*/true);
  if (static_cast<size_t>(block) + 2 < flat_.size()) {
    GatherLocked(BlockBucket(block + 1), /*wait=*/false);
  }
}

at::Tensor ZeroOptimizer::AfterBlock(int block, at::Tensor output) {
  {
    absl::MutexLock lock(&mu_);
    ReleaseLocked(BlockBucket(block));
  }
  if (torch::GradMode::is_enabled() && output.requires_grad()) {
    output.register_hook([this, block](const at::Tensor& gradient) {
      BeforeBlockBackward(block);
      return gradient;
    });
  }
  return output;
}

void ZeroOptimizer::BeforeBlockBackward(int block) {
  absl::MutexLock lock(&mu_);
  GatherLocked(BlockBucket(block), /*wait=*/true);
  if (block > 0) GatherLocked(BlockBucket(block - 1), /*wait=*/false);
}

void ZeroOptimizer::AfterForward() {
  // Without backward to come (evaluation), nothing stays gathered.
  if (torch::GradMode::is_enabled()) return;
  ReleaseAll();
}

at::Tensor ZeroOptimizer::UnitBuffer(int bucket) {
  absl::MutexLock lock(&mu_);
  const auto b = static_cast<size_t>(bucket);
  GatherLocked(b, /*wait=*/true);
  lent_[b] = true;
  return flat_[b];
}

void ZeroOptimizer::OnBucketReduced(int bucket) {
  absl::MutexLock lock(&mu_);
  const auto b = static_cast<size_t>(bucket);
  lent_[b] = false;
  ReleaseLocked(b);
}

absl::Status ZeroOptimizer::GatherAll() {
  if (stage_ != 3) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  try {
    BindShardedParametersLocked();
    for (size_t b = 0; b < flat_.size(); ++b) GatherLocked(b, /*wait=*/false);
    for (size_t b = 0; b < flat_.size(); ++b) WaitGatheredLocked(b);
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::GatherOnlyUnitOf(int param) {
  if (stage_ != 3) return absl::OkStatus();
  const auto unit =
      static_cast<size_t>(reducer_.plan().bucket_of[static_cast<size_t>(param)]);
  absl::MutexLock lock(&mu_);
  try {
    BindShardedParametersLocked();
    for (size_t b = 0; b < flat_.size(); ++b) {
      if (b != unit) ReleaseLocked(b);
    }
    GatherLocked(unit, /*wait=*/true);
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return absl::OkStatus();
}

void ZeroOptimizer::ReleaseAll() {
  if (stage_ != 3) return;
  absl::MutexLock lock(&mu_);
  for (size_t b = 0; b < flat_.size(); ++b) ReleaseLocked(b);
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
  // Stage 3 updated the shards; the next forward gathers what it uses.
  if (stage_ == 3) return absl::OkStatus();
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
    TORCH_CHECK(param >= 0, "the optimizer stepped a tensor that is not a ZeRO piece");
    rows.push_back(param);
  }
  torch::Tensor index = torch::tensor(rows, torch::kLong).to(device);
  if (!rows.empty()) whole.index_add_(0, index, squared.to(device));
  absl::Status reduced = communicator_.AllReduceSum(whole);
  if (!reduced.ok()) {
    norm_status_ = reduced;
    TORCH_CHECK(false,
                "reducing the optimizer's norms: ", std::string(reduced.message()));
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
    elements += stage_ >= 2 ? shards_[b].size() : flat_[b].numel();
  }
  return elements * static_cast<int64_t>(sizeof(float));
}

int64_t ZeroOptimizer::parameter_bytes() const {
  int64_t bytes = 0;
  for (size_t b = 0; b < flat_.size(); ++b) {
    const at::Tensor& held = stage_ == 3 ? shard_[b] : flat_[b];
    bytes += held.numel() * static_cast<int64_t>(held.element_size());
  }
  if (unit_memory_ != nullptr) bytes += static_cast<int64_t>(unit_memory_->peak_bytes());
  return bytes;
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

std::vector<ElementRange> ZeroOptimizer::StateRanges() const {
  std::vector<ElementRange> ranges(parameters_.size());
  for (const ShardPiece& piece : pieces_) {
    ranges[static_cast<size_t>(piece.param)] = {piece.param_offset,
                                                piece.param_offset + piece.numel};
  }
  return ranges;
}

void ZeroOptimizer::ImportState(
    const std::vector<std::optional<FlatParamState>>& ranges) {
  TORCH_CHECK(optimizer_ != nullptr, "ZeRO state import without an optimizer");
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = pieces_[j];
    const std::optional<FlatParamState>& state = ranges[static_cast<size_t>(piece.param)];
    if (!state.has_value()) continue;
    for (const auto& [name, tensor] : state->tensors) {
      TORCH_CHECK(tensor.numel() == piece.numel, "parameter ", piece.param, "'s ", name,
                  " holds ", tensor.numel(), " elements for a piece of ", piece.numel);
    }
    WriteFlatState(*optimizer_, piece_values_[j], *state);
  }
}

}  // namespace tessera::trainer
