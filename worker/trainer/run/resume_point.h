// Where a resumed run goes on from the checkpoint it loaded (checkpoint.h),
// and whether that checkpoint fits the run: the data's classes must be the
// checkpoint's (evaluation.h's CheckClassMapping), and weak scaling, whose
// training subset grows with the world size, resumes only at the world size
// that wrote it. The data position is the checkpoint's global one (or, for
// checkpoints older than it, the one its batch count gives) moved to a step
// boundary of this run's epoch plan, so that a run resumes at any world size
// (data_position.h).
//
// Use: ResumeLatest at the start of a --resume run: it loads the latest
// checkpoint into the model's replica (model_replica.h), takes the resume
// point from it (ResumePointOf) and restores the random generators
// (RestoreGenerators); the step, the data position and the loss scale are the
// caller's to take up.
//
// Thread-safety: ResumePointOf is a function of its arguments;
// RestoreGenerators and ResumeLatest set LibTorch's process-wide generators,
// and ResumeLatest the replica's state, on the training loop's thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_RESUME_POINT_H_
#define TESSERA_WORKER_TRAINER_RUN_RESUME_POINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/data_position.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/model_replica.h"
#include "worker/trainer/run/run_plan.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

struct ResumePoint {
  int64_t step = 0;             // optimizer steps done
  DataPosition position;        // where the next step's data starts
  int writer_world = 1;         // the world size that wrote the checkpoint
  LossScalerState loss_scaler;  // the checkpoint's (fp16's dynamic scale)
};

// The resume point of `state` for a run of `world` ranks with `options` and
// the epoch plan `epochs` on data whose classes are `class_names`.
// FailedPrecondition when the checkpoint does not fit the run.
absl::StatusOr<ResumePoint> ResumePointOf(const RankCheckpoint& state,
                                          const EpochPlan& epochs,
                                          const TrainerOptions& options, int world,
                                          const std::vector<std::string>& class_names);

// LibTorch's default generators for the run going on from `at`: the
// checkpoint's (CPU, and CUDA device `cuda_device` when >= 0) at the world size
// that wrote it; at another, rebuilt rather than restored: distinct per rank
// and fixed by `seed` and the step. RestoreRngState's errors.
absl::Status RestoreGenerators(const RankCheckpoint& state, const ResumePoint& at,
                               int64_t seed, int rank, int world, int cuda_device);

// Resumes from the latest checkpoint in `dir`: loads it into `replica`,
// checks it against the run (`plan`, `options`, the data's `class_names`) and
// restores the generators. nullopt when `dir` holds none; the errors of
// loading, of ResumePointOf and of RestoreGenerators.
absl::StatusOr<std::optional<ResumePoint>> ResumeLatest(
    const CheckpointDirectory& dir, ModelReplica& replica, const RunPlan& plan,
    const TrainerOptions& options, const std::vector<std::string>& class_names);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_RESUME_POINT_H_
