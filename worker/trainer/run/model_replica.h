// This rank's replica of the model and what trains it: the ViT on the rank's
// device, initialised from the run's seed (or from trainer.init_from's
// weights) and then made every rank's by broadcasting rank 0's values; the
// reducer that sums its gradients over the ranks in buckets (reducer.h);
// ZeRO's shards of the optimizer state, gradients and parameters
// (zero_optimizer.h; stage 0 in a world of one, which has nothing to shard);
// and the optimizer over the parameter groups (param_groups.h), with each
// group's learning-rate scale and head flag for the schedule (lr_schedule.h).
// It also moves that state in and out of checkpoints (checkpoint.h, and
// zero_checkpoint.h's shards), fitting it to this run's ZeRO stage and world
// size, and fingerprints the parameters.
//
// Use: ModelReplica::Create once per run, once the rank's placement and the
// model's shape are known; the training loop works through model() and
// reducer(), checks fp16's gradients with AnyNonFiniteGradient and steps with
// Step (optimizer() and zero() for what else needs them). Create reports the
// broadcast as the "collective" phase and seeds LibTorch's generator per rank
// after it (dropout masks differ across ranks).
//
// Thread-safety: the training loop's thread uses a replica; during backward
// the reducer's hooks run on LibTorch's autograd threads, as reducer.h says.
#ifndef TESSERA_WORKER_TRAINER_RUN_MODEL_REPLICA_H_
#define TESSERA_WORKER_TRAINER_RUN_MODEL_REPLICA_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/reducer.h"
#include "worker/trainer/dist/zero_optimizer.h"
#include "worker/trainer/model/param_groups.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/device_placement.h"
#include "worker/trainer/run/interval_metrics.h"
#include "worker/trainer/run/phase_reporter.h"
#include "worker/trainer/run/trainer_options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace tessera::trainer {

class CollectivesInProgress;  // in the .cc

class ModelReplica {
 public:
  // Builds the replica of a `config` ViT on `placement` with the options'
  // seed, init_from, buckets, ZeRO stage and optimizer. `communicator` and
  // `phases` must outlive the replica; `log` (set-up lines) may be null. The
  // statuses of loading init_from, of the reducer, of the broadcast and of
  // ZeRO.
  static absl::StatusOr<std::unique_ptr<ModelReplica>> Create(
      const TrainerOptions& options, ViTConfig config, const DevicePlacement& placement,
      Communicator& communicator, PhaseReporter& phases, std::ostream* log);
  ~ModelReplica();
  ModelReplica(const ModelReplica&) = delete;
  ModelReplica& operator=(const ModelReplica&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  VisionTransformer& model() { return *model_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  int64_t parameter_count() const { return parameter_count_; }
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // The ZeRO stage in effect: the options' in a world of several ranks, else 0.
  int zero_stage() const { return zero_stage_; }
  // Null at stage 0.
  ZeroOptimizer* zero() { return zero_.get(); }
  // Per optimizer group: its learning-rate scale (layer-wise decay) and
  // whether it holds the head (trained alone during a head-only warm-up).
  const std::vector<double>& group_scales() const { return group_scales_; }
  const std::vector<bool>& group_heads() const { return group_heads_; }

  // fp16's overflow check: whether any of the step's summed gradients is
  // infinite or NaN (ZeRO: over every rank's shard, agreed through an
  // all-reduce). Reads a device value.
  absl::StatusOr<bool> AnyNonFiniteGradient();
  // The optimizer step on the summed gradients, clipped first to the global
  // norm `clip_grad_norm` when it is positive (ZeRO: on this rank's shards,
  // then the parameters gathered again). ZeRO's collectives' errors.
  absl::Status Step(double clip_grad_norm);

  // Optimizer state, gradient and parameter bytes this rank holds (printed
  // at the start, reported with the first metrics).
  int64_t OptimizerStateBytes() const;
  int64_t GradientBytes() const;
  int64_t ParameterBytes() const;
  RankSizes Sizes() const;
  // "ZeRO stage S: this rank holds N bytes of optimizer state and ..." for
  // the set-up log.
  std::string DescribeState() const;

  // Loads the latest checkpoint in `dir` into the model and the optimizer
  // (under ZeRO, the pieces this rank keeps, from shard files or cut from a
  // stage-0 checkpoint's whole state) and returns this rank's state in it;
  // nullopt when `dir` holds none. The random generators are the caller's.
  // DataLoss for an optimizer state that does not fit.
  absl::StatusOr<std::optional<RankCheckpoint>> LoadLatestCheckpoint(
      const CheckpointDirectory& dir);
  // This rank's part of the checkpoint of `state` (checkpoint.h's files,
  // plus its optimizer shard under ZeRO), as bytes in host memory.
  absl::StatusOr<CheckpointFiles> Snapshot(const CheckpointDirectory& dir,
                                           const RankCheckpoint& state);

  // FNV-1a 64 over the parameters' bytes in registration order, as 16 hex
  // digits: ranks that trained in sync have equal fingerprints.
  absl::StatusOr<std::string> Fingerprint();

 private:
  ModelReplica(const TrainerOptions& options, Communicator& communicator);
  absl::Status Build(ViTConfig config, const DevicePlacement& placement,
                     PhaseReporter& phases, std::ostream* log);
  // trainer.init_from: the layout's LayerNorm epsilon into `config` (before
  // the model is built), then the weights into the model (after).
  absl::Status PrepareInit(ViTConfig& config);
  absl::Status LoadInit(std::ostream* log);
  absl::Status BuildReducer(std::ostream* log);
  absl::Status BuildOptimizer();
  // The optimizer over the optimized tensors; each group's learning-rate
  // scale and whether it holds the head.
  std::unique_ptr<torch::optim::Optimizer> MakeOptimizerFor(
      const OptimizedTensor& optimized, std::vector<double>& scales,
      std::vector<bool>& heads);
  // After the checkpoint files of `step` are read: the optimizer state from
  // ZeRO shard files, or into ZeRO pieces from `whole` (the optimizer the
  // checkpoint loaded into, over the whole parameters).
  absl::Status RestoreOptimizerState(const CheckpointDirectory& dir,
                                     const RankCheckpoint& state, int64_t step,
                                     torch::optim::Optimizer& whole);
  // The parameters' element counts, in registration order (at stage 3 too,
  // where their storage is freed between uses).
  std::vector<int64_t> ParameterNumels() const;

  const TrainerOptions& options_;
  Communicator& communicator_;  // Not owned.
  const int rank_;
  const int world_;

  std::unique_ptr<SafetensorsFile> init_file_;  // trainer.init_from, while loading
  std::optional<WeightLayout> init_layout_;
  std::optional<VisionTransformer> model_;
  std::vector<at::Tensor> parameters_;
  int64_t parameter_count_ = 0;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<CollectivesInProgress> named_collectives_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int zero_stage_ = 0;
  std::unique_ptr<ZeroOptimizer> zero_;  // null at stage 0
  std::vector<double> group_scales_;
  std::vector<bool> group_heads_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_MODEL_REPLICA_H_
