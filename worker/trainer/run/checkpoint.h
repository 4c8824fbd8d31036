// Training checkpoints: everything needed to continue a run exactly where it
// stopped, so the loss curve after --resume matches an uninterrupted run.
//
// Layout under the checkpoint directory (which every node must see, e.g. NFS):
//   step-000000000120/model.pt          rank 0: model, optimizer state, step
//   step-000000000120/rank-00000.pt     each rank: its RNG states, loader position,
//   step-000000000120/rank-00001.pt     loss scale, world size
//   step-000000000120/optimizer-rank-00000.shard  ZeRO runs: each rank's optimizer
//                                       shard (zero_checkpoint.h); model.pt then
//                                       holds no optimizer state
//   step-000000000120/keep              rank 0, where a run stopped before its
//                                       end (stop_fraction: a search's rung)
//   latest                              "step-000000000120", the newest complete one
// Every file is written atomically: to a temporary file in the same directory,
// fsync'd, then renamed over the final name (and the directory fsync'd). A
// checkpoint becomes visible only when rank 0 rewrites `latest` (the same way),
// after a barrier has confirmed that every rank's file is in place, so a crash at
// any moment leaves `latest` naming a complete checkpoint (or no checkpoint).
// Rank 0 then keeps only the newest `keep` checkpoints, and every one marked
// `keep`: the next rung of a search trial resumes into the same directory,
// and each rung's model must stay there for `tessctl search best --export`.
//
// LibTorch types appear only as forward declarations; the .cc serialises with
// torch::serialize archives. Functions block on file I/O; call them from the
// training loop's thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_H_
#define TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/model/loss_scaler.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace tessera::trainer {

// Where the loop stands: `step` optimizer steps are done and the next micro-batch
// is number `batch_in_epoch` of epoch `epoch`.
struct LoopPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  // Samples of `epoch` consumed by all ranks together (data_position.h): the
  // world-size-free position a run resumes from. -1 in checkpoints written
  // before it was stored (then batch_in_epoch * batch size * world size).
  int64_t sample_in_epoch = -1;
};

// What each rank saves for itself.
struct RankCheckpoint {
  int rank = 0;
  int world_size = 1;
  LoopPosition position;
  LossScalerState loss_scaler;
  // Default-generator states (opaque bytes from LibTorch): CPU, and the rank's
  // CUDA device when it trains on one (empty otherwise).
  std::string cpu_rng_state;
  std::string cuda_rng_state;
  // Class index -> name of the data the model was trained on. Written by rank
  // 0 into model.pt and beside it as classes.json ({"classes": [...]}); empty
  // in checkpoints written before they were stored.
  std::vector<std::string> class_names;
  // The writer's ZeRO stage (written by rank 0 into model.pt; 0 in
  // checkpoints written before it was stored). Above 0 the optimizer state is
  // in the shard files (zero_checkpoint.h), and the optimizer passed to the
  // functions below is neither saved nor loaded.
  int zero_stage = 0;
};

// Called with the bytes written so far, from the writing thread.
using WriteProgress = std::function<void(int64_t bytes)>;

// The largest checkpoint file read back whole (model.pt, a rank's file, a
// format-1 ZeRO shard): past any model this trainer trains (a ViT-g/14 with
// Adam's state is about 20 GiB), so only a file that is no checkpoint meets it.
inline constexpr size_t kMaxCheckpointFileBytes = size_t{64} << 30;

// The checkpoint directory: names, the `latest` pointer, pruning.
class CheckpointDirectory {
 public:
  explicit CheckpointDirectory(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  // "<root>/step-<12 digits>".
  std::string StepDir(int64_t step) const;
  std::string ModelPath(int64_t step) const;
  std::string RankPath(int64_t step, int rank) const;
  // "<step dir>/keep": a checkpoint whose directory holds it is never pruned.
  std::string KeepMarkerPath(int64_t step) const;

  // The step of the checkpoint `latest` names; nullopt when there is none yet.
  // DataLoss when `latest` exists but cannot be parsed.
  absl::StatusOr<std::optional<int64_t>> LatestStep() const;

  // Points `latest` at `step` (atomically).
  absl::Status PublishLatest(int64_t step) const;

  // Removes checkpoint directories older than the newest `keep` whose step is at
  // most `latest_step` (directories of unfinished, newer checkpoints stay).
  // Those marked kept (KeepMarkerPath) neither go nor count. Internal naming
  // the directory on the first one that cannot be removed.
  absl::Status Prune(int64_t latest_step, int keep) const;

 private:
  std::string root_;
};

// Rank 0's last act of a checkpoint, once every rank's files are in place:
// points `latest` at `step`, then prunes to the newest `keep`. An error
// publishing is returned (the checkpoint is not there). A prune that fails
// (a file held open on NFS, a directory the rank's account may not remove)
// leaves only older checkpoints on disk, never a wrong one: it is written to
// `log` (the rank's stderr) as a warning and the run goes on.
absl::Status PublishCheckpoint(const CheckpointDirectory& dir, int64_t step, int keep,
                               std::ostream& log);

// Captures and restores LibTorch's default random generators (CPU, and CUDA
// device `cuda_device` when it is >= 0 and LibTorch has CUDA).
void CaptureRngState(int cuda_device, RankCheckpoint& state);
absl::Status RestoreRngState(int cuda_device, const RankCheckpoint& state);

// One rank's part of a checkpoint as bytes in host memory, ready to write:
// the snapshot taken at the step boundary (for CUDA tensors, the copy to the
// host), so that training can go on while the files are written.
struct CheckpointFiles {
  int64_t step = 0;
  std::string step_dir;
  std::vector<std::pair<std::string, std::string>> files;  // path, contents
  int64_t total_bytes() const;
};

// Serialises this rank's part of the checkpoint at `state.position.step`: the
// rank file, and on rank 0 the model and optimizer (and classes.json) too.
absl::StatusOr<CheckpointFiles> SerializeCheckpoint(
    const CheckpointDirectory& dir, const RankCheckpoint& state,
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer);

// Creates the step directory and writes every file atomically and durably
// (fsync of the file and the directory), telling `progress` the bytes
// written so far. Plain file I/O: safe on a background thread.
absl::Status WriteCheckpointFiles(const CheckpointFiles& files,
                                  const WriteProgress& progress = nullptr);

// SerializeCheckpoint, then WriteCheckpointFiles.
absl::Status SaveCheckpointFiles(const CheckpointDirectory& dir,
                                 const RankCheckpoint& state,
                                 const torch::nn::Module& model,
                                 const torch::optim::Optimizer& optimizer);

// Reads checkpoint `step` into `model` and `optimizer` (from rank 0's file; every
// rank reads it) and returns the state to resume with. At the world size that
// wrote it, that is this rank's own file. At another world size the model and
// optimizer still load (they do not depend on it), and the state is rank 0's
// (the global data position, the loss scale) with no random generator states
// (empty): the caller rebuilds those; `world_size` then says the writer's.
// NotFound for missing files, DataLoss for unreadable ones.
absl::StatusOr<RankCheckpoint> LoadCheckpointFiles(const CheckpointDirectory& dir,
                                                   int64_t step, int rank, int world_size,
                                                   torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer);

// The class names stored in a checkpoint's model.pt (empty for checkpoints
// written before they were). NotFound / DataLoss for a missing or unreadable
// file.
absl::StatusOr<std::vector<std::string>> ReadCheckpointClassNames(
    const std::string& model_path);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_H_
