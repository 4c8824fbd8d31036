#include "worker/trainer/run/run_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/model/fused_layers.h"
#include "worker/trainer/run/lr_schedule.h"

namespace tessera::trainer {
namespace {

std::string FormatCount(int64_t n) {
  return n >= 1000000 ? absl::StrCat(n / 100000 / 10.0, "M") : absl::StrCat(n);
}

}  // namespace

absl::StatusOr<RunPlan> PlanRun(const TrainerOptions& options, const DataShape& shape,
                                int rank, int world, int local_rank) {
  ASSIGN_OR_RETURN(const DevicePlacement placement, ResolveDevice(options, local_rank));
  ASSIGN_OR_RETURN(ViTConfig config,
                   ResolveViTConfig(options.model, shape.channels, shape.num_classes,
                                    options.image_size));
  config.dropout = options.dropout;
  config.cpu_kernels = options.cpu_kernels;
  DistributedSamplerOptions train_sampling;
  train_sampling.dataset_size = shape.train_size;
  train_sampling.rank = rank;
  train_sampling.world_size = world;
  train_sampling.seed = options.seed;
  if (options.scaling == "weak") {
    train_sampling.subset_size =
        WeakScalingSubsetSize(shape.train_size, options.weak_fraction, world);
  }
  ASSIGN_OR_RETURN(DistributedSampler train_sampler,
                   DistributedSampler::Create(train_sampling));
  DistributedSamplerOptions test_sampling = train_sampling;
  test_sampling.dataset_size = shape.test_size;
  test_sampling.subset_size.reset();
  test_sampling.shuffle = false;
  test_sampling.keep_tail = true;
  ASSIGN_OR_RETURN(DistributedSampler test_sampler,
                   DistributedSampler::Create(test_sampling));
  std::optional<DistributedSampler> val_sampler;
  if (shape.val_size > 0) {
    DistributedSamplerOptions val_sampling = test_sampling;
    val_sampling.dataset_size = shape.val_size;
    ASSIGN_OR_RETURN(val_sampler, DistributedSampler::Create(val_sampling));
  } else if (options.eval_every > 0) {
    RETURN_IF_ERROR(CheckHasSplit(shape, Split::kVal));
  }
  absl::StatusOr<EpochPlan> epochs =
      EpochPlan::Create(EpochPlanOptions{.epoch_size = train_sampler.epoch_size(),
                                         .world_size = world,
                                         .batch_size = options.batch_size,
                                         .accum = options.grad_accum});
  if (!epochs.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "each of ", world, " ranks gets ", train_sampler.num_samples(),
        " training samples, fewer than one step's ", options.grad_accum,
        " micro-batches of ", options.batch_size, " (", epochs.status().message(), ")"));
  }
  const bool fp16 = options.precision == "fp16";
  return RunPlan{.placement = placement,
                 .device = TorchDevice(placement),
                 .config = std::move(config),
                 .train_sampler = std::move(train_sampler),
                 .test_sampler = std::move(test_sampler),
                 .val_sampler = std::move(val_sampler),
                 .epochs = *std::move(epochs),
                 .synchronize = options.allreduce && world > 1,
                 .fp16 = fp16,
                 .autocast = placement.cuda && options.precision != "fp32",
                 .autocast_dtype = fp16 ? at::kHalf : at::kBFloat16};
}

int64_t StopStep(double stop_fraction, int64_t step, int64_t total_steps) {
  if (!(stop_fraction > 0 && stop_fraction < 1)) return total_steps;
  const auto at = static_cast<int64_t>(
      std::llround(stop_fraction * static_cast<double>(total_steps)));
  return std::min(total_steps, std::max({at, step, int64_t{1}}));
}

absl::StatusOr<RunSpan> SpanOf(const TrainerOptions& options, const EpochPlan& epochs,
                               int64_t step, const DataPosition& start,
                               double warmup_fraction) {
  RunSpan span;
  span.total_steps = step + epochs.StepsUntilEpoch(start, options.epochs);
  if (options.max_steps > 0)
    span.total_steps = std::min(span.total_steps, options.max_steps);
  if (step > span.total_steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint at step ", step, " is past this run's last step ",
                     span.total_steps, ": resume with the settings it was written with"));
  }
  // Warm-up is a share of a whole run at this world size, resumed or not.
  int64_t whole_run = epochs.StepsUntilEpoch(DataPosition{}, options.epochs);
  if (options.max_steps > 0) whole_run = std::min(whole_run, options.max_steps);
  span.warmup_steps =
      ResolveWarmupSteps(options.warmup_steps, whole_run, warmup_fraction);
  return span;
}

std::string DescribeRun(const TrainerOptions& options, const RunPlan& plan,
                        const DataShape& shape, const RunFacts& facts) {
  std::ostringstream line;
  line << options.model << " (" << FormatCount(facts.parameter_count) << " parameters, "
       << plan.config.image_size << " px, patch " << plan.config.patch_size << ") on "
       << options.dataset << ": " << shape.train_size << " train / " << shape.test_size
       << " test images; world " << facts.world_size << " (" << facts.backend
       << "), device " << plan.placement.name() << ", " << options.precision << ", "
       << plan.train_sampler.num_samples() << " samples per rank, "
       << plan.epochs.steps_per_epoch() << " steps per epoch of " << options.grad_accum
       << " x " << options.batch_size << ", " << facts.total_steps << " steps, "
       << options.optimizer << ", gradient all-reduce "
       << (plan.synchronize ? absl::StrCat(facts.buckets, " buckets",
                                           options.overlap ? ", overlapped" : "")
                            : "off")
       << (facts.resumed_from > 0
               ? absl::StrCat(
                     ", resumed at step ", facts.resumed_from,
                     facts.resumed_world_size != facts.world_size
                         ? absl::StrCat(" (written by ", facts.resumed_world_size,
                                        " ranks; epoch ", facts.position.epoch,
                                        ", sample ", facts.position.sample, ")")
                         : "")
               : "")
       << ", CPU kernels "
       << (!plan.config.cpu_kernels || plan.placement.cuda
               ? "LibTorch's"
               : (CpuLinearAvailable() ? "tessera (LayerNorm, GELU; Linear on oneDNN)"
                                       : "tessera (LayerNorm, GELU)"));
  return line.str();
}

}  // namespace tessera::trainer
