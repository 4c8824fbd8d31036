#include "worker/trainer/run/model_replica.h"

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "worker/trainer/model/gradient_norm.h"
#include "worker/trainer/model/optimizer_state.h"
#include "worker/trainer/model/optimizers.h"
#include "worker/trainer/model/param_hash.h"
#include "worker/trainer/run/zero_checkpoint.h"

namespace tessera::trainer {

// Names the communicator's collectives in the progress reports for as long as
// it lives (the communicator outlives the trainer's run, not the lease thread).
class CollectivesInProgress {
 public:
  CollectivesInProgress(ProgressTracker* progress, const Communicator& communicator)
      : progress_(progress) {
    if (progress_ != nullptr) progress_->SetCollectives(communicator.collectives());
  }
  ~CollectivesInProgress() {
    if (progress_ != nullptr) progress_->SetCollectives(nullptr);
  }
  CollectivesInProgress(const CollectivesInProgress&) = delete;
  CollectivesInProgress& operator=(const CollectivesInProgress&) = delete;

 private:
  ProgressTracker* const progress_;  // Not owned.
};

namespace {

OptimizerSettings SettingsOf(const TrainerOptions& options) {
  OptimizerSettings settings;
  settings.name = options.optimizer;
  settings.lr = options.lr;
  settings.weight_decay = options.weight_decay;
  settings.momentum = options.momentum;
  if (options.adam_betas.size() == 2) {
    settings.beta1 = options.adam_betas[0];
    settings.beta2 = options.adam_betas[1];
  }
  settings.adam_eps = options.adam_eps;
  settings.lamb_max_trust = options.lamb_max_trust;
  settings.lamb_min_trust = options.lamb_min_trust;
  settings.lamb_trust_when_no_decay = options.lamb_trust_when_no_decay;
  return settings;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelReplica>> ModelReplica::Create(
    const TrainerOptions& options, ViTConfig config, const DevicePlacement& placement,
    Communicator& communicator, PhaseReporter& phases, std::ostream* log) {
  auto replica = absl::WrapUnique(new ModelReplica(options, communicator));
  RETURN_IF_ERROR(replica->Build(std::move(config), placement, phases, log));
  return replica;
}

ModelReplica::ModelReplica(const TrainerOptions& options, Communicator& communicator)
    : options_(options),
      communicator_(communicator),
      rank_(communicator.rank()),
      world_(communicator.world_size()) {}

ModelReplica::~ModelReplica() = default;

absl::Status ModelReplica::Build(ViTConfig config, const DevicePlacement& placement,
                                 PhaseReporter& phases, std::ostream* log) {
  RETURN_IF_ERROR(MakePlacementCurrent(placement));
  // Initialisation draws from LibTorch's process-wide generator; the lock keeps
  // trainers sharing a process (the ranks of in-process tests) from
  // interleaving their draws, so the seed alone decides the initial model.
  static absl::Mutex init_mu(absl::kConstInit);
  RETURN_IF_ERROR(PrepareInit(config));
  {
    absl::MutexLock lock(&init_mu);
    torch::manual_seed(static_cast<uint64_t>(options_.seed));
    model_.emplace(config);
  }
  RETURN_IF_ERROR(LoadInit(log));
  (*model_)->to(TorchDevice(placement));
  parameters_ = (*model_)->parameters();
  for (const torch::Tensor& p : parameters_) parameter_count_ += p.numel();
  RETURN_IF_ERROR(BuildReducer(log));
  named_collectives_ =
      std::make_unique<CollectivesInProgress>(phases.progress(), communicator_);
  // Rank 0's initial values become everyone's.
  phases.Report(RankPhase::kCollective);
  RETURN_IF_ERROR(reducer_->BroadcastParameters(0));
  phases.Report(RankPhase::kStartup);
  // Dropout masks must differ across ranks.
  torch::manual_seed(static_cast<uint64_t>(options_.seed) + 7919u * (rank_ + 1u));
  return BuildOptimizer();
}

absl::Status ModelReplica::PrepareInit(ViTConfig& config) {
  if (options_.init_from.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(init_file_, SafetensorsFile::Open(options_.init_from));
  std::vector<std::string> names;
  for (const TensorView& t : init_file_->tensors()) names.push_back(t.name);
  if (options_.init_names == "auto") {
    ASSIGN_OR_RETURN(init_layout_, DetectWeightLayout(names));
  } else {
    ASSIGN_OR_RETURN(init_layout_, ParseWeightLayout(options_.init_names));
  }
  config.layer_norm_eps = ConventionsOf(*init_layout_).layer_norm_eps;
  return absl::OkStatus();
}

absl::Status ModelReplica::LoadInit(std::ostream* log) {
  if (init_file_ == nullptr) return absl::OkStatus();
  PretrainedOptions loading;
  loading.layout = init_layout_;
  absl::StatusOr<PretrainedSummary> summary =
      LoadPretrained(**model_, *init_file_, loading);
  init_file_.reset();
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat("trainer.init_from ", options_.init_from, ": ",
                                     summary.status().message()));
  }
  if (log != nullptr && rank_ == 0) {
    *log << "[rank 0] init_from " << options_.init_from << " ("
         << WeightLayoutName(summary->layout) << " names): " << summary->ToString()
         << std::endl;
  }
  return absl::OkStatus();
}

absl::Status ModelReplica::BuildReducer(std::ostream* log) {
  ReducerOptions reducing;
  reducing.bucket_cap_mb = options_.bucket_cap_mb;
  reducing.first_bucket_mb = options_.first_bucket_mb;
  reducing.overlap = options_.overlap;
  reducing.min_buckets = options_.min_buckets;
  // A world of one never all-reduces: its gradients need no buckets, and
  // ZeRO has nothing to shard.
  reducing.gradient_views = world_ > 1;
  zero_stage_ = world_ > 1 ? options_.zero_stage : 0;
  reducing.zero_stage = zero_stage_;
  if (zero_stage_ == 3) {
    // The units stage 3 gathers and frees together: each encoder block's
    // parameters (1 + its index), and the rest of the model (0).
    reducing.units = BlockUnits(**model_);
    reducing.unit_buffer = [this](int bucket) { return zero_->UnitBuffer(bucket); };
    reducing.on_bucket_reduced = [this](int bucket) { zero_->OnBucketReduced(bucket); };
  }
  if (options_.zero_stage > 0 && world_ == 1 && log != nullptr) {
    *log << "[rank 0] ZeRO stage " << options_.zero_stage
         << " has nothing to shard in a world of one: the rank keeps the whole "
            "optimizer state (stage 0)"
         << std::endl;
  }
  ASSIGN_OR_RETURN(reducer_, Reducer::Create(parameters_, communicator_, reducing));
  return absl::OkStatus();
}

absl::Status ModelReplica::BuildOptimizer() {
  OptimizedTensor optimized = WholeParameter;
  if (zero_stage_ > 0) {
    ASSIGN_OR_RETURN(
        zero_, ZeroOptimizer::Create(zero_stage_, parameters_, *reducer_, communicator_));
    std::map<const void*, int> index;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      index[parameters_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
    }
    optimized = [this, index](const torch::Tensor& p) {
      return zero_->PieceOf(index.at(p.unsafeGetTensorImpl()));
    };
  }
  optimizer_ = MakeOptimizerFor(optimized, group_scales_, group_heads_);
  if (zero_ != nullptr) zero_->Attach(*optimizer_);
  if (zero_stage_ == 3) (*model_)->set_block_hooks(zero_.get());
  return absl::OkStatus();
}

std::unique_ptr<torch::optim::Optimizer> ModelReplica::MakeOptimizerFor(
    const OptimizedTensor& optimized, std::vector<double>& scales,
    std::vector<bool>& heads) {
  ParamGroups groups = options_.layer_decay < 1.0 || options_.head_warmup_steps > 0
                           ? LayerDecayGroups(**model_, options_.layer_decay, optimized)
                           : WeightDecayGroups(**model_, optimized);
  scales.clear();
  for (const TensorGroup& group : groups.groups) scales.push_back(group.lr_scale);
  heads = std::move(groups.heads);
  return MakeOptimizer(std::move(groups.groups), SettingsOf(options_));
}

absl::StatusOr<std::optional<RankCheckpoint>> ModelReplica::LoadLatestCheckpoint(
    const CheckpointDirectory& dir) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> latest, dir.LatestStep());
  if (!latest.has_value()) return std::nullopt;
  // ZeRO: a stage-0 checkpoint's optimizer loads into one over the whole
  // parameters, which RestoreOptimizerState then cuts into the pieces.
  std::unique_ptr<torch::optim::Optimizer> whole;
  if (zero_ != nullptr) {
    std::vector<double> scales;
    std::vector<bool> heads;
    whole = MakeOptimizerFor(WholeParameter, scales, heads);
  }
  torch::optim::Optimizer& loaded = whole != nullptr ? *whole : *optimizer_;
  ASSIGN_OR_RETURN(RankCheckpoint state,
                   LoadCheckpointFiles(dir, *latest, rank_, world_, **model_, loaded));
  RETURN_IF_ERROR(RestoreOptimizerState(dir, state, *latest, loaded));
  return state;
}

absl::Status ModelReplica::RestoreOptimizerState(const CheckpointDirectory& dir,
                                                 const RankCheckpoint& state,
                                                 int64_t step,
                                                 torch::optim::Optimizer& whole) {
  if (state.zero_stage == 0 && zero_ == nullptr) return absl::OkStatus();
  std::vector<std::optional<FlatParamState>> flat(parameters_.size());
  // The elements of each parameter whose state this rank keeps.
  std::vector<ElementRange> wanted;
  if (zero_ != nullptr) {
    wanted = zero_->StateRanges();
  } else {
    for (const int64_t numel : ParameterNumels()) wanted.push_back({0, numel});
  }
  if (state.zero_stage > 0) {
    ASSIGN_OR_RETURN(
        flat, LoadZeroShards(dir, step, state.world_size, ParameterNumels(), wanted));
  }
  try {
    if (state.zero_stage == 0) {
      // A stage-0 checkpoint's state, whole, cut to this rank's ranges.
      for (size_t i = 0; i < parameters_.size(); ++i) {
        flat[i] = ReadFlatState(whole, parameters_[i]);
        if (!flat[i].has_value() || wanted[i].size() <= 0) {
          flat[i].reset();
          continue;
        }
        for (auto& [name, tensor] : flat[i]->tensors) {
          tensor = tensor.narrow(0, wanted[i].begin, wanted[i].size());
        }
      }
    }
    if (zero_ != nullptr) {
      zero_->ImportState(flat);
    } else {
      for (size_t i = 0; i < parameters_.size(); ++i) {
        if (flat[i].has_value()) WriteFlatState(*optimizer_, parameters_[i], *flat[i]);
      }
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("checkpoint at step ", step, ": the optimizer state: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointFiles> ModelReplica::Snapshot(const CheckpointDirectory& dir,
                                                       const RankCheckpoint& state) {
  // Stage 3: the whole model for the snapshot, freed again after it.
  if (zero_ != nullptr) RETURN_IF_ERROR(zero_->GatherAll());
  absl::StatusOr<CheckpointFiles> serialized =
      SerializeCheckpoint(dir, state, **model_, *optimizer_);
  if (zero_ != nullptr) zero_->ReleaseAll();
  ASSIGN_OR_RETURN(CheckpointFiles files, std::move(serialized));
  if (zero_ != nullptr) {
    ASSIGN_OR_RETURN(auto shard,
                     SerializeZeroShard(dir, state.position.step, rank_, world_,
                                        zero_->ExportState(), ParameterNumels()));
    files.files.push_back(std::move(shard));
  }
  return files;
}

absl::StatusOr<std::string> ModelReplica::Fingerprint() {
  Fnv1a64 hash;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    // Stage 3: a unit's memory at a time.
    if (zero_ != nullptr) RETURN_IF_ERROR(zero_->GatherOnlyUnitOf(static_cast<int>(i)));
    const torch::Tensor values = parameters_[i].detach().to(torch::kCPU).contiguous();
    hash.Update(values.data_ptr(), values.numel() * values.element_size());
  }
  if (zero_ != nullptr) zero_->ReleaseAll();
  return hash.Hex();
}

absl::StatusOr<bool> ModelReplica::AnyNonFiniteGradient() {
  if (zero_ != nullptr) return zero_->AnyNonFinite();
  return AnyNonFinite(reducer_->gradient_buffers());
}

absl::Status ModelReplica::Step(double clip_grad_norm) {
  if (zero_ != nullptr) return zero_->Step(clip_grad_norm);
  if (clip_grad_norm > 0) ClipGradientNorm(reducer_->gradient_buffers(), clip_grad_norm);
  optimizer_->step();
  return absl::OkStatus();
}

std::vector<int64_t> ModelReplica::ParameterNumels() const {
  std::vector<int64_t> numels;
  numels.reserve(parameters_.size());
  for (const torch::Tensor& p : parameters_) numels.push_back(p.numel());
  return numels;
}

int64_t ModelReplica::OptimizerStateBytes() const {
  const int64_t elements = zero_ != nullptr ? zero_->state_elements() : parameter_count_;
  return StateTensorsPerElement(*optimizer_) * elements *
         static_cast<int64_t>(sizeof(float));
}

int64_t ModelReplica::GradientBytes() const {
  return zero_ != nullptr ? zero_->gradient_bytes()
                          : parameter_count_ * static_cast<int64_t>(sizeof(float));
}

int64_t ModelReplica::ParameterBytes() const {
  return zero_ != nullptr ? zero_->parameter_bytes()
                          : parameter_count_ * static_cast<int64_t>(sizeof(float));
}

RankSizes ModelReplica::Sizes() const {
  return RankSizes{.optimizer_state_bytes = OptimizerStateBytes(),
                   .gradient_bytes = GradientBytes(),
                   .parameter_bytes = ParameterBytes()};
}

std::string ModelReplica::DescribeState() const {
  return absl::StrCat(
      "ZeRO stage ", zero_stage_, ": this rank holds ", OptimizerStateBytes(),
      " bytes of optimizer state and ", GradientBytes(), " bytes of gradients",
      zero_stage_ >= 2
          ? absl::StrCat(" (plus at most ", reducer_->buckets_in_flight() + 1,
                         " whole gradient buckets during backward)")
          : "");
}

}  // namespace tessera::trainer
