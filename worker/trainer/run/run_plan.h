// What one rank's training run will do, decided before anything is built:
// where it trains (device_placement.h) and in which precision, the model's
// shape for the data (vit_config.h), the samples each split gives this rank
// (distributed_sampler.h), the epochs' optimizer steps (data_position.h), and
// whether the gradients are all-reduced; and, once the run knows where it
// starts (a resumed checkpoint's step), the steps it trains in all and its
// warm-up (RunSpan).
//
// Use: PlanRun once, first; the model, the feeds and the loop read the plan.
// SpanOf after resuming; DescribeRun for the line the run's log starts with.
//
// Thread-safety: PlanRun is a function of its arguments (and of the CUDA
// devices LibTorch sees); a plan is a value.
#ifndef TESSERA_WORKER_TRAINER_RUN_RUN_PLAN_H_
#define TESSERA_WORKER_TRAINER_RUN_RUN_PLAN_H_

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/trainer/data/data_position.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/run/device_placement.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

struct RunPlan {
  DevicePlacement placement;
  c10::Device device;  // TorchDevice(placement)
  // The preset with the data's channels and classes, the run's image size,
  // dropout and CPU kernels.
  ViTConfig config;
  DistributedSampler train_sampler;  // the run's scaling (weak: a subset)
  DistributedSampler test_sampler;   // unshuffled, every sample once
  // The validation split's, alike; unset where the data has none.
  std::optional<DistributedSampler> val_sampler;
  EpochPlan epochs;
  bool synchronize = false;  // gradients are all-reduced (--allreduce, world > 1)
  bool fp16 = false;         // fp16 mixed precision: the loss is scaled
  bool autocast = false;     // forward passes under CUDA autocast
  at::ScalarType autocast_dtype = at::kBFloat16;
};

// The plan of the rank `rank` of `world` (`local_rank` on its machine) on data
// of `shape`. ResolveDevice's, ResolveViTConfig's and the samplers' errors;
// FailedPrecondition when the rank's share holds less than one optimizer step.
absl::StatusOr<RunPlan> PlanRun(const TrainerOptions& options, const DataShape& shape,
                                int rank, int world, int local_rank);

// The steps a run trains, counted from the job's start.
struct RunSpan {
  int64_t total_steps = 0;   // the run ends after this many
  int64_t warmup_steps = 0;  // the learning rate's linear warm-up (lr_schedule.h)
};

// The span of a run that starts after `step` steps with its data at `start`:
// to the end of epoch options.epochs - 1, or options.max_steps when that comes
// first. The warm-up is options.warmup_steps, or warmup_fraction of a whole
// run at this world size, resumed or not. FailedPrecondition when `step` is
// past the end (a checkpoint written with other settings).
absl::StatusOr<RunSpan> SpanOf(const TrainerOptions& options, const EpochPlan& epochs,
                               int64_t step, const DataPosition& start,
                               double warmup_fraction);

// The step a run stops at: round(stop_fraction x total_steps), at least one
// step and at least `step` (a resume at or past it trains nothing), or
// total_steps when stop_fraction is 0 or 1. The schedule stays total_steps'.
int64_t StopStep(double stop_fraction, int64_t step, int64_t total_steps);

// What the set-up line says besides the options and the plan.
struct RunFacts {
  int64_t parameter_count = 0;
  int world_size = 1;
  std::string backend;         // the communicator's
  int64_t total_steps = 0;     // RunSpan's
  size_t buckets = 0;          // the reducer's gradient buckets
  int64_t resumed_from = 0;    // the checkpoint's step; 0: not resumed
  int resumed_world_size = 0;  // the world size that wrote it
  DataPosition position;       // where the resumed run's data starts
};

// The set-up line, e.g. "vit-micro (139018 parameters, 28 px, patch 4) on
// synthetic: 512 train / 128 test images; world 1 (local), device cpu, fp32,
// 512 samples per rank, 32 steps per epoch of 1 x 16, 12 steps, adamw,
// gradient all-reduce off, CPU kernels tessera (LayerNorm, GELU)".
std::string DescribeRun(const TrainerOptions& options, const RunPlan& plan,
                        const DataShape& shape, const RunFacts& facts);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_RUN_PLAN_H_
