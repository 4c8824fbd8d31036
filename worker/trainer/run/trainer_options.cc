#include "worker/trainer/run/trainer_options.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fault_spec.h"
#include "common/profile_steps.h"
#include "common/status_macros.h"
#include "common/trainer_choices.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/dist/net_util.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {
namespace {

template <typename T>
absl::Status CheckRange(const char* flag, T value, T low, T high) {
  if (value < low || value > high) {
    if (high == std::numeric_limits<T>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be >= ", low, ", got ", value));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be in [", low, ", ", high, "], got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckOneOf(const char* flag, const std::string& value, ChoiceList allowed) {
  if (IsChoice(allowed, value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be one of ",
                                                 ChoicesText(allowed, ", "), "; got \"",
                                                 value, "\""));
}

// A finite value in [low, high], or in [low, high) when `high_open`.
absl::Status CheckInterval(const char* flag, double v, double low, double high,
                           bool high_open) {
  if (!std::isfinite(v) || v < low || v > high || (high_open && v == high)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be in [", low, ", ",
                                                   high, high_open ? ")" : "]", ", got ",
                                                   v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainerOptions(const TrainerOptions& o, const OptionLimits& limits) {
  absl::StatusOr<ViTConfig> model = FindViTPreset(o.model);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model: ", model.status().message()));
  }
  bool known_dataset = false;
  for (const std::string& name : KnownDatasets()) known_dataset |= name == o.dataset;
  if (!known_dataset) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset: unknown dataset \"", o.dataset,
                     "\"; known datasets: ", absl::StrJoin(KnownDatasets(), ", ")));
  }
  if (o.dataset != "synthetic" && o.data_dir.empty()) {
    return absl::InvalidArgumentError("--data-dir must name a directory");
  }
  RETURN_IF_ERROR(CheckRange<int32_t>("epochs", o.epochs, 1, limits.max_epochs));
  RETURN_IF_ERROR(CheckRange<int64_t>("max-steps", o.max_steps, 0,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(
      CheckRange<int32_t>("batch-size", o.batch_size, 1, limits.max_batch_size));
  // An evaluation takes no step: its learning rate is never used.
  if (!o.eval_only && (!std::isfinite(o.lr) || o.lr <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr must be a positive number, got ", o.lr));
  }
  RETURN_IF_ERROR(CheckRange<int64_t>("train-subset", o.train_subset, 0,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int64_t>("test-subset", o.test_subset, 0,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int32_t>("metrics-every", o.metrics_every, 1,
                                      std::numeric_limits<int32_t>::max()));
  RETURN_IF_ERROR(
      CheckRange<int64_t>("seed", o.seed, 0, std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int32_t>("threads", o.threads, 0, limits.max_threads));
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight-decay must be a non-negative number, got ", o.weight_decay));
  }
  RETURN_IF_ERROR(CheckOneOf("optimizer", o.optimizer, kOptimizerChoices));
  RETURN_IF_ERROR(CheckOneOf("precision", o.precision, kPrecisionChoices));
  RETURN_IF_ERROR(CheckOneOf("scaling", o.scaling, kScalingChoices));
  RETURN_IF_ERROR(CheckOneOf("device", o.device, kDeviceChoices));
  RETURN_IF_ERROR(CheckInterval("momentum", o.momentum, 0, 1, true));
  RETURN_IF_ERROR(CheckInterval("label-smoothing", o.label_smoothing, 0, 1, true));
  RETURN_IF_ERROR(CheckInterval("dropout", o.dropout, 0, 1, true));
  RETURN_IF_ERROR(CheckInterval("weak-fraction", o.weak_fraction, 0, 1, false));
  if (o.weak_fraction <= 0) {
    return absl::InvalidArgumentError("--weak-fraction must be positive");
  }
  RETURN_IF_ERROR(CheckInterval("clip-grad-norm", o.clip_grad_norm, 0, 1e9, false));
  RETURN_IF_ERROR(CheckInterval("bucket-cap-mb", o.bucket_cap_mb, 0.001, 4096, false));
  RETURN_IF_ERROR(
      CheckInterval("first-bucket-mb", o.first_bucket_mb, 0.001, 4096, false));
  RETURN_IF_ERROR(CheckRange<int64_t>("warmup-steps", o.warmup_steps, -1,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int32_t>("grad-accum", o.grad_accum, 1, 65536));
  RETURN_IF_ERROR(CheckRange<int64_t>("checkpoint-every", o.checkpoint_every, 0,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int32_t>("image-size", o.image_size, 0, 4096));
  RETURN_IF_ERROR(CheckRange<int32_t>("data-workers", o.data_workers, 0, 64));
  RETURN_IF_ERROR(CheckRange<int32_t>("min-buckets", o.min_buckets, 1, 4096));
  if (o.resume && o.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint-dir");
  }
  const absl::StatusOr<FaultSpec> fault = ParseFaultSpec(o.fault);
  if (!fault.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", fault.status().message()));
  }
  return ValidateDataAndInit(o);
}

absl::Status ValidateDataAndInit(const TrainerOptions& o) {
  for (const auto& [name, values] :
       {std::pair{"mean", &o.mean}, std::pair{"std", &o.std}}) {
    if (!values->empty() && values->size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " takes three values (R, G, B), got ", values->size()));
    }
    for (double v : *values) {
      if (!std::isfinite(v) ||
          (std::string(name) == "std" ? v <= 0 : v < -10 || v > 10)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": ", v, " is not a usable value"));
      }
    }
  }
  if (!(o.crop_fraction > 0 && o.crop_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--crop-fraction must be in (0, 1], got ", o.crop_fraction));
  }
  if (!(o.data_max_skipped >= 0 && o.data_max_skipped <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-max-skipped must be in [0, 1], got ", o.data_max_skipped));
  }
  if (!IsChoice(kInitNamesChoices, o.init_names)) {
    return absl::InvalidArgumentError(absl::StrCat("--init-names: unknown layout \"",
                                                   o.init_names, "\"; expected ",
                                                   ChoicesText(kInitNamesChoices, ", ")));
  }
  if (!(o.layer_decay > 0 && o.layer_decay <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layer-decay must be in (0, 1], got ", o.layer_decay));
  }
  RETURN_IF_ERROR(CheckRange<int64_t>("head-warmup-steps", o.head_warmup_steps, 0,
                                      std::numeric_limits<int64_t>::max()));
  return ValidateStepOptions(o);
}

absl::Status ValidateStepOptions(const TrainerOptions& o) {
  if (!o.profile_steps.empty()) {
    absl::StatusOr<ProfileSteps> steps = ParseProfileSteps(o.profile_steps);
    if (!steps.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile-steps: ", steps.status().message()));
    }
  }
  RETURN_IF_ERROR(CheckOneOf("cuda-graph", o.cuda_graph, kCudaGraphChoices));
  RETURN_IF_ERROR(CheckOneOf("interpolation", o.interpolation, kInterpolationChoices));
  if (!IsZeroStage(o.zero_stage)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zero-stage must be one of ", ZeroStageChoicesText(), "; got ", o.zero_stage));
  }
  if (o.zero_stage > 0 && !o.allreduce) {
    return absl::InvalidArgumentError(
        "--zero-stage shards the optimizer over ranks that average their gradients: "
        "it needs --allreduce=true");
  }
  return ValidateEvalOptions(o);
}

absl::Status ValidateSearchKeys(const TrainerOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction must be in [0, 1), got ", o.val_fraction));
  }
  if (o.val_fraction > 0 && IsEncodedImageDataset(o.dataset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--val-fraction holds out part of an in-memory training set; ", o.dataset,
        " data has its own validation split, its val/ folder (or val- shards)"));
  }
  RETURN_IF_ERROR(CheckRange<int64_t>("val-seed", o.val_seed, 0,
                                      std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(CheckRange<int64_t>("eval-every", o.eval_every, 0,
                                      std::numeric_limits<int64_t>::max()));
  if (!(o.stop_fraction >= 0 && o.stop_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stop-fraction must be in [0, 1], got ", o.stop_fraction));
  }
  if (o.stop_fraction > 0 && o.stop_fraction < 1 && o.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "--stop-fraction stops the run to be resumed later: it needs --checkpoint-dir");
  }
  if (!o.adam_betas.empty() && o.adam_betas.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--adam-betas takes two values (beta1 beta2), got ", o.adam_betas.size()));
  }
  for (const double beta : o.adam_betas) {
    RETURN_IF_ERROR(CheckInterval("adam-betas", beta, 0, 1, true));
  }
  if (!(o.adam_eps > 0 && o.adam_eps < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--adam-eps must be in (0, 1), got ", o.adam_eps));
  }
  RETURN_IF_ERROR(CheckInterval("lamb-min-trust", o.lamb_min_trust, 0, 1e6, false));
  RETURN_IF_ERROR(CheckInterval("lamb-max-trust", o.lamb_max_trust, 0, 1e6, false));
  if (o.lamb_max_trust <= 0 || o.lamb_min_trust > o.lamb_max_trust) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lamb-max-trust must be positive and at least --lamb-min-trust; got ",
        o.lamb_max_trust, " and ", o.lamb_min_trust));
  }
  return absl::OkStatus();
}

absl::Status ValidateEvalOptions(const TrainerOptions& o) {
  RETURN_IF_ERROR(ValidateSearchKeys(o));
  if (o.eval_split != "test" && o.eval_split != "val" && o.eval_split != "train") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--eval-split must be one of test, val, train; got \"", o.eval_split, "\""));
  }
  RETURN_IF_ERROR(CheckRange<int64_t>("eval-step", o.eval_step, 0,
                                      std::numeric_limits<int64_t>::max()));
  if (o.eval_step > 0 && !(o.eval_only && o.resume)) {
    return absl::InvalidArgumentError(
        "--eval-step picks the checkpoint --eval-only --resume evaluates");
  }
  if (!o.eval_only) return absl::OkStatus();
  if (o.resume == o.init_from.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      o.resume ? "--eval-only takes its model from --init-from or from the checkpoint "
                 "of --resume, not both"
               : "--eval-only needs a model: --init-from FILE, or --resume with "
                 "--checkpoint-dir");
}

absl::Status ValidateLaunchOptions(const LaunchOptions& l, bool coordinator_supported,
                                   const OptionLimits& limits) {
  RETURN_IF_ERROR(
      CheckRange<int32_t>("world-size", l.world_size, 1, limits.max_world_size));
  RETURN_IF_ERROR(CheckRange<int32_t>("rank", l.rank, 0, l.world_size - 1));
  RETURN_IF_ERROR(CheckRange<int32_t>("local-rank", l.local_rank, 0, l.world_size - 1));
  RETURN_IF_ERROR(
      CheckRange<int64_t>("job-id", l.job_id, 0, std::numeric_limits<int64_t>::max()));
  RETURN_IF_ERROR(
      CheckRange<int32_t>("attempt", l.attempt, 0, std::numeric_limits<int32_t>::max()));
  if (l.collective_timeout < limits.min_collective_timeout ||
      l.collective_timeout > limits.max_collective_timeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("--collective-timeout must be in [",
                     absl::FormatDuration(limits.min_collective_timeout), ", ",
                     absl::FormatDuration(limits.max_collective_timeout), "], got ",
                     absl::FormatDuration(l.collective_timeout)));
  }
  if (!l.coordinator.empty()) {
    if (!coordinator_supported) {
      return absl::InvalidArgumentError(
          "--coordinator: this tessera-train was built without gRPC "
          "(TESSERA_TRAINER_ONLY); it runs standalone or with --rendezvous-store");
    }
    absl::StatusOr<HostPort> address = ParseHostPort(l.coordinator);
    if (!address.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--coordinator: ", address.status().message()));
    }
    if (address->port == 0) {
      return absl::InvalidArgumentError("--coordinator: port must not be 0");
    }
  } else if (!l.rendezvous_store.empty()) {
    absl::StatusOr<HostPort> address = ParseHostPort(l.rendezvous_store);
    if (!address.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rendezvous-store: ", address.status().message()));
    }
    if (address->port == 0) {
      return absl::InvalidArgumentError(
          "--rendezvous-store: every rank needs the same fixed port, not 0");
    }
  } else if (l.world_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world-size ", l.world_size,
                     " needs --coordinator (or --rendezvous-store); without them only a "
                     "standalone run of world size 1 is possible"));
  }
  return absl::OkStatus();
}

int EffectiveThreads(const TrainerOptions& options) {
  return options.threads > 0 ? options.threads : 1;
}

data::Interpolation EffectiveInterpolation(const TrainerOptions& options) {
  return data::ParseInterpolation(options.interpolation)
      .value_or(data::Interpolation::kBilinear);
}

}  // namespace tessera::trainer
