#include "worker/trainer/run/resume_point.h"

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/run/evaluation.h"

namespace tessera::trainer {

absl::StatusOr<ResumePoint> ResumePointOf(const RankCheckpoint& state,
                                          const EpochPlan& epochs,
                                          const TrainerOptions& options, int world,
                                          const std::vector<std::string>& class_names) {
  RETURN_IF_ERROR(CheckClassMapping("the checkpoint's", state.class_names, class_names));
  const int writer_world = state.world_size;
  if (writer_world != world && options.scaling == "weak") {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint at step ", state.position.step, " was written by ", writer_world,
        " ranks; weak scaling trains a subset that grows with the world size, so it "
        "resumes only at that size (this run has ",
        world, ")"));
  }
  const LoopPosition& at = state.position;
  const DataPosition written{at.epoch,
                             at.sample_in_epoch >= 0
                                 ? at.sample_in_epoch
                                 : at.batch_in_epoch * options.batch_size * writer_world};
  return ResumePoint{.step = at.step,
                     .position = epochs.AtStepBoundary(written),
                     .writer_world = writer_world,
                     .loss_scaler = state.loss_scaler};
}

absl::Status RestoreGenerators(const RankCheckpoint& state, const ResumePoint& at,
                               int64_t seed, int rank, int world, int cuda_device) {
  if (at.writer_world == world) return RestoreRngState(cuda_device, state);
  // Rebuilt, not restored: distinct per rank, fixed by the seed and step.
  torch::manual_seed(static_cast<uint64_t>(seed) + 7919u * (rank + 1u) +
                     104729u * static_cast<uint64_t>(at.step));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ResumePoint>> ResumeLatest(
    const CheckpointDirectory& dir, ModelReplica& replica, const RunPlan& plan,
    const TrainerOptions& options, const std::vector<std::string>& class_names) {
  ASSIGN_OR_RETURN(const std::optional<RankCheckpoint> state,
                   replica.LoadLatestCheckpoint(dir));
  if (!state.has_value()) return std::nullopt;
  ASSIGN_OR_RETURN(ResumePoint at, ResumePointOf(*state, plan.epochs, options,
                                                 replica.world_size(), class_names));
  RETURN_IF_ERROR(RestoreGenerators(*state, at, options.seed, replica.rank(),
                                    replica.world_size(), plan.placement.index));
  return at;
}

}  // namespace tessera::trainer
