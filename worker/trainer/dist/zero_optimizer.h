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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/reducer.h"
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

class ZeroOptimizer {
 public:
  // `stage` 1 or 2; `parameters` in registration order, as the reducer got
  // them (a reducer of the same ZeRO stage). InvalidArgument otherwise.
  // Makes the parameters views into the flat buffers.
  static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(
      int stage, const std::vector<at::Tensor>& parameters, Reducer& reducer,
      Communicator& communicator);

  ~ZeroOptimizer();
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

  // The optimizer step over this rank's shard, then the all-gather of the new
  // values into every parameter. `clip_grad_norm` > 0: first scales the
  // gradients by min(1, clip / global norm).
  absl::Status Step(double clip_grad_norm);

  // Elements of the parameters this rank holds optimizer state for, and the
  // bytes of gradients it holds between backward passes (stage 1: the whole
  // padded buckets; stage 2: its shards).
  int64_t state_elements() const;
  int64_t gradient_bytes() const;

  // This rank's optimizer state, copied to the host (pieces with no state yet
  // are left out).
  std::vector<ZeroPieceState> ExportState() const;
  // Sets the pieces' state from each parameter's whole flattened state
  // (indexed like the parameters; nullopt: none).
  void ImportState(const std::vector<std::optional<FlatParamState>>& whole);

 private:
  ZeroOptimizer(int stage, std::vector<at::Tensor> parameters, Reducer& reducer,
                Communicator& communicator);

  // This rank's gradient shard of bucket `b` (a view).
  at::Tensor GradientShard(size_t b) const;
  // Makes every parameter a view of its slot in the flat buffers again,
  // keeping its value, where something replaced its storage.
  void BindParameters();
  // The shards' gradients onto the pieces.
  void BindPieces();
  absl::Status ClipGradients(double max_norm);
  absl::Status AllGatherParameters();
  // FusedLamb's norm reduction: rows by piece summed per parameter over ranks.
  void ReduceSquaredNorms(const std::vector<at::Tensor>& pieces, at::Tensor& squared);

  // Constant after construction.
  const int stage_;
  const std::vector<at::Tensor> parameters_;
  Reducer& reducer_;            // Not owned.
  Communicator& communicator_;  // Not owned.
  const std::vector<ShardPiece> pieces_;
  std::vector<ShardRange> shards_;        // per bucket: this rank's range
  std::vector<at::Tensor> flat_;          // per bucket: the parameters' flat buffer
  std::vector<at::Tensor> slots_;         // per parameter: its view of flat_, shaped
  std::vector<at::Tensor> piece_values_;  // per piece: its view of flat_
  std::vector<int> piece_of_param_;       // per parameter: its piece, or -1

  torch::optim::Optimizer* optimizer_ = nullptr;  // Not owned.
  absl::Status norm_status_;  // a failed norm reduction, for Step to return
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_ZERO_OPTIMIZER_H_
