// ZeRO stages 1 and 2 (DeepSpeed's "zero redundancy optimizer") over the
// Reducer's buckets: the optimizer state is divided among the ranks.
//
// Flat parameters: each bucket's parameters are views into one flat buffer,
// laid out as the bucket's gradients are and padded to world-size equal
// shards (bucket_plan.h's ShardOf), as FSDP's FlatParameter and DeepSpeed's
// flat groups are. A parameter may be split across ranks. A rank's optimizer
// is built over its pieces (PieceOf: a flat view of this rank's part of a
// parameter, inside that buffer) and keeps state only for them. No second
// copy of the parameters exists. Per step:
//   the Reducer reduce-scatters each bucket's gradients, so this rank holds
//   the summed gradients of its shard (stage 2: and of nothing else between
//   backward passes; reducer.h);
// then Step clips by the global norm (each rank's shard's squared norm,
// summed by an all-reduce), steps the optimizer over the pieces, which
// updates this rank's shard of the parameters in place (LAMB reduces its
// per-parameter norms across the ranks through FusedLamb's norm reduction),
// and all-gathers every bucket's buffer in place, so each rank's updated
// shard reaches every rank's parameters. Traffic per step: a reduce-scatter
// and an all-gather, as much as stage 0's all-reduce.
//
// Stage 3 (FSDP's FULL_SHARD): the parameters are sharded at rest too. Each
// unit of the model (a transformer block; the rest of the model is one more
// unit) is a bucket of its own (reducer.h), and a rank keeps only its shard
// of each unit's flat buffer, which the optimizer's pieces are views of. The
// flat buffer's memory exists only while the unit is gathered: just before
// the block's forward (the next block's gather launched meanwhile, to
// overlap), and again before its backward (the hook on its output's gradient;
// the previous block's gather launched meanwhile). It is freed after the
// forward; in backward it is the unit's gradient bucket, each gradient taking
// its parameter's slot once computed, and is freed once the bucket's
// reduce-scatter is done (the reducer's unit_buffer and on_bucket_reduced).
// The memory is reused from unit to unit (UnitMemory). The units
// outside the blocks stay gathered from the start of forward to the end of
// backward. The parameters keep their shapes; only their storage's memory
// comes and goes, as FSDP frees it. The step updates the shards in place and
// needs no all-gather: the next forward gathers what it uses. Traffic per
// step: two all-gathers and a reduce-scatter, 1.5 times stage 0's. Whatever
// reads the whole parameters outside forward (a checkpoint, the parameter
// hash) brackets it with GatherAll and ReleaseAll.
//
// Something that replaces a parameter's storage (loading a checkpoint sets
// it to the loaded tensor) is undone before the next step: the values are
// copied back into the flat buffer and the parameter made its view again.
//
// Usage: Create (after the parameters hold their initial values), build the
// optimizer over PieceOf(i) (in place of parameter i, skipping undefined
// pieces), Attach it, then per step FinishBackward on the reducer and Step
// here (AnyNonFinite first with fp16 loss scaling).
//
// Thread-safety: the training loop's thread only. The reducer, the
// communicator and the attached optimizer must outlive it.
#ifndef TESSERA_WORKER_TRAINER_DIST_ZERO_OPTIMIZER_H_
#define TESSERA_WORKER_TRAINER_DIST_ZERO_OPTIMIZER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/reducer.h"
#include "worker/trainer/model/block_hooks.h"
#include "worker/trainer/model/optimizer_state.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace tessera::trainer {

// A piece's optimizer state, for a checkpoint: which part of which parameter.
struct ZeroPieceState {
  int param = 0;
  int64_t param_offset = 0;  // first element within the flattened parameter
  FlatParamState state;      // tensors of the piece's element count
};

// A range of one flattened parameter's elements, [begin, end).
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

class UnitMemory;  // stage 3's memory for gathered units; in the .cc

class ZeroOptimizer final : public BlockHooks {
 public:
  // `stage` 1, 2 or 3; `parameters` in registration order, as the reducer got
  // them (a reducer of the same ZeRO stage; at stage 3 its units are 0 for
  // the parameters outside the blocks and 1 + i for block i's).
  // InvalidArgument otherwise. Makes the parameters views into the flat
  // buffers (stage 3: and frees those).
  static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(
      int stage, const std::vector<at::Tensor>& parameters, Reducer& reducer,
      Communicator& communicator);

  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  int stage() const { return stage_; }

  // The tensor the optimizer updates in place of parameter `param`: this
  // rank's part of it, flattened; undefined where this rank holds none.
  at::Tensor PieceOf(int param) const;

  // The optimizer over the pieces; sets FusedLamb's norm reduction.
  void Attach(torch::optim::Optimizer& optimizer);

  // Whether any rank's gradient shard holds an inf or NaN (the same answer on
  // every rank). After the reducer's FinishBackward.
  absl::StatusOr<bool> AnyNonFinite();

  // The optimizer step over this rank's shard, then (stages 1 and 2) the
  // all-gather of the new values into every parameter. `clip_grad_norm` > 0:
  // first scales the gradients by min(1, clip / global norm).
  absl::Status Step(double clip_grad_norm);

  // Stage 3: the model's block hooks (model/block_hooks.h), which gather and
  // free the units around their forward and backward. A collective that
  // fails there throws (c10::Error naming it), as forward reports errors.
  void BeforeForward() override;
  void BeforeBlock(int block) override;
  at::Tensor AfterBlock(int block, at::Tensor output) override;
  void AfterForward() override;
  // Stage 3: the reducer's unit_buffer (the gathered unit of `bucket`) and
  // on_bucket_reduced (it is done with its backward, and is freed).
  at::Tensor UnitBuffer(int bucket);
  void OnBucketReduced(int bucket);
  // Stage 3: every unit gathered, for whatever reads the whole parameters
  // outside forward; ReleaseAll frees them again. Nothing at other stages.
  absl::Status GatherAll();
  void ReleaseAll();
  // Stage 3: parameter `param`'s unit gathered and every other freed, for
  // reading the parameters one at a time within a unit's memory.
  absl::Status GatherOnlyUnitOf(int param);

  // Elements of the parameters this rank holds optimizer state for, and the
  // bytes of gradients it holds between backward passes (stage 1: the whole
  // padded buckets; stages 2 and 3: its shards).
  int64_t state_elements() const;
  int64_t gradient_bytes() const;
  // Bytes of parameters this rank holds: the flat buffers (stages 1 and 2),
  // or its shards plus the most memory its gathered units have held at once
  // (stage 3: the full-parameter buffers in flight, known once a step ran).
  int64_t parameter_bytes() const;

  // This rank's optimizer state, copied to the host (pieces with no state yet
  // are left out).
  std::vector<ZeroPieceState> ExportState() const;
  // The elements of each parameter (indexed like the parameters) that this
  // rank keeps optimizer state for: its piece, or an empty range.
  std::vector<ElementRange> StateRanges() const;
  // Sets the pieces' state from each parameter's state over its StateRanges()
  // range (indexed like the parameters; nullopt: none).
  void ImportState(const std::vector<std::optional<FlatParamState>>& ranges);

 private:
  ZeroOptimizer(int stage, std::vector<at::Tensor> parameters, Reducer& reducer,
                Communicator& communicator);

  // This rank's gradient shard of bucket `b` (a view).
  at::Tensor GradientShard(size_t b) const;
  // Makes every parameter a view of its slot in the flat buffers again,
  // keeping its value, where something replaced its storage; BindParameter
  // for parameter `i` (stages 1 and 2, or a gathered unit), true if it did.
  void BindParameters();
  bool BindParameter(size_t i);
  // The shards' gradients onto the pieces.
  void BindPieces();
  absl::Status ClipGradients(double max_norm);
  absl::Status AllGatherParameters();
  // Stage 3: bucket `b`'s flat buffer is given memory, this rank's shard
  // copied in and the all-gather launched (`wait`: and waited for); Release
  // waits for a gather under way and frees the memory. Under mu_.
  void GatherLocked(size_t b, bool wait);
  void WaitGatheredLocked(size_t b);
  void ReleaseLocked(size_t b);
  // Stage 3: the bucket of block `block`, and of the rest of the model.
  size_t BlockBucket(int block) const { return flat_.size() - 2 - block; }
  size_t RootBucket() const { return flat_.size() - 1; }
  // Stage 3: BindParameters for sharded units: a unit whose parameters
  // something replaced takes their values into its shard.
  void BindShardedParametersLocked();
  // Stage 3's hook before block `block`'s backward.
  void BeforeBlockBackward(int block);
  // FusedLamb's norm reduction: rows by piece summed per parameter over ranks.
  void ReduceSquaredNorms(const std::vector<at::Tensor>& pieces, at::Tensor& squared);

  // Constant after construction.
  const int stage_;
  const std::vector<at::Tensor> parameters_;
  Reducer& reducer_;            // Not owned.
  Communicator& communicator_;  // Not owned.
  const std::vector<ShardPiece> pieces_;
  std::vector<ShardRange> shards_;  // per bucket: this rank's range
  std::vector<at::Tensor> flat_;    // per bucket: the parameters' flat buffer
  std::vector<at::Tensor> slots_;   // per parameter: its view of flat_, shaped
  std::vector<at::Tensor>
      piece_values_;                 // per piece: its view of flat_ (stage 3: shard_)
  std::vector<int> piece_of_param_;  // per parameter: its piece, or -1
  std::vector<at::Tensor> shard_;    // stage 3, per bucket: this rank's values
  std::shared_ptr<UnitMemory> unit_memory_;  // stage 3: memory of gathered units

  // Stage 3: per bucket, whether its flat buffer has memory, and its gather
  // under way. The hooks may run on autograd's threads.
  absl::Mutex mu_;
  std::vector<bool> gathered_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> lent_ ABSL_GUARDED_BY(mu_);  // holding gradients (UnitBuffer)
  std::vector<std::unique_ptr<PendingCollective>> gathering_ ABSL_GUARDED_BY(mu_);

  torch::optim::Optimizer* optimizer_ = nullptr;  // Not owned.
  absl::Status norm_status_;  // a failed norm reduction, for Step to return
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_ZERO_OPTIMIZER_H_
