#include "worker/trainer/run/trainer_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/flag_checks.h"
#include "common/trainer_choices.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {
namespace {

// A duration as absl writes them ("300s", "5m", "1m30s") or plain seconds
// ("300"). Throws CLI11's ValidationError, which parsing reports.
absl::Duration ParseDurationFlag(const std::string& flag, const std::string& text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    if (std::isfinite(seconds)) return absl::Seconds(seconds);
  } else {
    absl::Duration duration;
    if (absl::ParseDuration(text, &duration) && duration != absl::InfiniteDuration() &&
        duration != -absl::InfiniteDuration()) {
      return duration;
    }
  }
  throw CLI::ValidationError(
      flag, absl::StrCat("\"", text, "\" is not a duration such as 300s, 5m or 300"));
}

// Declares the flags that carry tessera.v1.TrainerConfig fields, in their help
// group, and keeps their names in the order declared.
class ConfigFlags {
 public:
  explicit ConfigFlags(CLI::App& app) : app_(app) {}

  template <typename T>
  void operator()(const std::string& name, T& value, const std::string& help) {
    names_.push_back(name);
    if constexpr (std::is_same_v<T, bool>) {
      // --name alone means true; --name=true and --name=false (as the
      // worker writes a job spec's fields) set either value.
      app_.add_flag("--" + name, value, help)->group(kGroup);
    } else {
      CLI::Option* option = app_.add_option("--" + name, value, help)->group(kGroup);
      // A number that does not parse is answered with what was expected.
      if constexpr (std::is_arithmetic_v<T>) {
        option->check(IsNumber<T>());
      } else if constexpr (std::is_same_v<T, std::vector<double>>) {
        option->check(IsNumber<double>());
      }
    }
  }

  // A flag that sets its field through `set`.
  template <typename T>
  void Function(const std::string& name, std::function<void(const T&)> set,
                const std::string& help) {
    names_.push_back(name);
    app_.add_option_function<T>("--" + name, std::move(set), help)->group(kGroup);
  }

  std::vector<std::string> TakeNames() { return std::move(names_); }

 private:
  static constexpr const char* kGroup = "Training (tessera.v1.TrainerConfig)";

  CLI::App& app_;
  std::vector<std::string> names_;
};

// What is trained, on which data, for how long.
void DeclareRunFlags(ConfigFlags& config, TrainerOptions& t) {
  std::vector<std::string> presets;
  for (const ViTPreset& preset : ViTPresets()) presets.push_back(preset.name);
  config("model", t.model, absl::StrCat("model preset: ", absl::StrJoin(presets, ", ")));
  config("dataset", t.dataset, ChoicesText(kDatasetChoices));
  config("data-dir", t.data_dir, "directory holding the dataset files (plain or .gz)");
  config("epochs", t.epochs, "passes over this rank's shard");
  config("max-steps", t.max_steps, "stop after this many optimizer steps (0: no limit)");
  config("batch-size", t.batch_size, "per-rank batch size");
  config("lr", t.lr, "peak AdamW learning rate (warmup, then cosine decay)");
  config("train-subset", t.train_subset, "use only the first N training images (0: all)");
  config("test-subset", t.test_subset, "use only the first N test images (0: all)");
  config("allreduce", t.allreduce, "average gradients across ranks (true|false)");
  config("metrics-every", t.metrics_every, "report metrics every K steps");
  config("seed", t.seed, "seed for initialisation, shuffling and synthetic data");
  config("threads", t.threads, "intra-op threads per rank (0: trainer default, 1)");
}

// The optimizer, its schedule and the arithmetic.
void DeclareOptimizationFlags(ConfigFlags& config, TrainerOptions& t) {
  config("weight-decay", t.weight_decay, "weight decay (decoupled for AdamW)");
  config("optimizer", t.optimizer,
         absl::StrCat(ChoicesText(kOptimizerChoices), " (lamb: large batches)"));
  config("momentum", t.momentum, "SGD momentum");
  config("warmup-steps", t.warmup_steps, "linear warmup steps (-1: 5% of the run)");
  config("label-smoothing", t.label_smoothing, "cross-entropy label smoothing in [0, 1)");
  config("grad-accum", t.grad_accum,
         "micro-batches per optimizer step; only the last one allreduces");
  config("clip-grad-norm", t.clip_grad_norm, "clip the global gradient norm (0: off)");
  config("precision", t.precision,
         absl::StrCat(ChoicesText(kPrecisionChoices), " (bf16/fp16 on CUDA only)"));
}

// How the data is split across ranks, and checkpoints.
void DeclareScalingAndCheckpointFlags(ConfigFlags& config, TrainerOptions& t) {
  config("scaling", t.scaling,
         absl::StrCat(ChoicesText(kScalingChoices),
                      ": strong trains on the whole dataset at any world size, weak on "
                      "weak-fraction of it per rank"));
  config("weak-fraction", t.weak_fraction,
         "weak scaling: fraction of the training set each rank gets");
  config("checkpoint-dir", t.checkpoint_dir,
         "checkpoint directory, on storage every node sees (empty: none)");
  config("checkpoint-every", t.checkpoint_every,
         "checkpoint every N steps (0: only at the end)");
  config("resume", t.resume, "resume from the latest checkpoint in --checkpoint-dir");
}

// The model's input and regularisation, the device, gradient buckets, and the
// --fault test hook.
void DeclareModelAndDeviceFlags(ConfigFlags& config, TrainerOptions& t) {
  config("dropout", t.dropout, "dropout probability");
  config("bucket-cap-mb", t.bucket_cap_mb, "gradient bucket size in MiB (DDP: 25)");
  config("image-size", t.image_size, "model input size; images are resized (0: preset)");
  config.Function<bool>(
      "augment", [&t](const bool& on) { t.augment = on; },
      "random crop with padding + horizontal flip (default: on for CIFAR)");
  config("device", t.device, ChoicesText(kDeviceChoices));
  config("data-workers", t.data_workers, "background data loading threads");
  config("first-bucket-mb", t.first_bucket_mb,
         "size of the first gradient bucket in MiB (DDP: 1)");
  config("overlap", t.overlap, "start each bucket's allreduce during backward");
  config("fault", t.fault,
         "TEST HOOK, off by default: make one rank misbehave so tests can show the "
         "coordinator's rank watch. hang:rank=R,step=N,phase=P blocks rank R for good "
         "once it has done N steps and enters phase P (data, forward, backward, "
         "collective, optimizer, eval, checkpoint) while its lease and progress "
         "reports go on; slow:rank=R,phase=P,ms=M makes rank R spend M ms more in "
         "phase P every step. Add ,attempt=A to act in that attempt only "
         "(worker/trainer/README.md)");
}

// Image data normalisation and cropping, and fine-tuning from pretrained weights.
void DeclareImageAndFineTuningFlags(ConfigFlags& config, TrainerOptions& t) {
  config("mean", t.mean,
         "normalisation mean per RGB channel, three values (default: ImageNet's "
         "0.485 0.456 0.406 for image data, the training split's own for the "
         "other datasets; one-channel data takes three equal values)");
  config("std", t.std,
         "normalisation deviation per RGB channel, three values (default: "
         "ImageNet's 0.229 0.224 0.225 for image data, the training split's own "
         "for the other datasets)");
  config("crop-fraction", t.crop_fraction,
         "image data: evaluation centre crop of the image resized to size / fraction");
  config("data-max-skipped", t.data_max_skipped,
         "image data: share of a split's samples that may be unreadable before the "
         "run fails");
  config("init-from", t.init_from,
         "pretrained weights to start from: a safetensors file with timm, Hugging "
         "Face, torchvision or tessera names (docs/pretrained.md)");
  config("init-names", t.init_names,
         absl::StrCat("the names --init-from uses: ", ChoicesText(kInitNamesChoices)));
  config("layer-decay", t.layer_decay,
         "layer-wise learning-rate decay: block i of depth L trains at lr x "
         "decay^(L + 1 - i) (1: off)");
  config("head-warmup-steps", t.head_warmup_steps,
         "train only the classifier head for the first N steps (0: off)");
  config("profile-steps", t.profile_steps,
         "profile optimizer steps A-B (counted from 1) with LibTorch's profiler: a "
         "Chrome trace and summary in --profile-dir, and the top operators (CPU) or "
         "kernels (GPU) per step in the log; e.g. --profile-steps 20-25 (empty: off)");
  config("cuda-graph", t.cuda_graph,
         absl::StrCat("capture the training step in a CUDA graph and replay it (one GPU, "
                      "AdamW, fp32 or bf16): ",
                      ChoicesText(kCudaGraphChoices),
                      "; auto where the run allows it (the log says why not otherwise), "
                      "on fails if it cannot"));
  config("zero-stage", t.zero_stage,
         absl::StrCat("ZeRO stage, one of ", ZeroStageChoicesText(),
                      ": 0 keeps the whole optimizer state on every rank; 1 "
                      "reduce-scatters the gradients, each rank updates its shard of "
                      "the parameters with its shard of the optimizer state, then "
                      "all-gathers them; 2 also keeps only its shard of the gradients "
                      "between backward passes; 3 also keeps only its shard of the "
                      "parameters, gathering each transformer block's just before "
                      "its forward and backward (FSDP) (e.g. --zero-stage 3)"));
}

// Evaluation only (evaluation.h): no training, one split evaluated.
void DeclareEvaluationFlags(ConfigFlags& config, TrainerOptions& t) {
  config("eval-only", t.eval_only,
         "evaluate, do not train: the model of --init-from, or of the checkpoint "
         "--resume finds in --checkpoint-dir (--lr is not needed)");
  config("eval-split", t.eval_split,
         "the split --eval-only evaluates: test | val (the validation split: an "
         "image folder's val/, or what --val-fraction holds out) | train");
  config("eval-step", t.eval_step,
         "--eval-only --resume: the checkpoint of this step (0: the latest)");
}

// The validation split, the resize, the optimizer knobs and the stop fraction,
// in TrainerConfig's order (fields 53-62).
void DeclareSearchFlags(ConfigFlags& config, TrainerOptions& t) {
  config("val-fraction", t.val_fraction,
         "hold out this fraction of the training set as the validation split, by "
         "class, the same on every rank and resume (0: none; e.g. --val-fraction 0.1)");
  config("val-seed", t.val_seed, "the validation split's own seed (not --seed's)");
  config("eval-every", t.eval_every,
         "score the validation split every N steps: val_loss, val_accuracy (0: at the "
         "end only)");
  config("interpolation", t.interpolation,
         absl::StrCat("the resize to the model's input size (image crops, and "
                      "in-memory images of another size), ",
                      ChoicesText(kInterpolationChoices)));
  config("adam-betas", t.adam_betas, "AdamW's beta1 beta2 (default 0.9 0.999)");
  config("adam-eps", t.adam_eps, "AdamW's epsilon");
  config("lamb-max-trust", t.lamb_max_trust, "LAMB's trust-ratio cap");
  config("lamb-min-trust", t.lamb_min_trust, "LAMB's trust-ratio floor");
  config("lamb-trust-when-no-decay", t.lamb_trust_when_no_decay,
         "LAMB: apply the trust ratio to groups without weight decay too");
  config("stop-fraction", t.stop_fraction,
         "train this fraction of the run's steps, checkpoint and stop; the "
         "learning-rate schedule stays the whole run's (0: the whole run)");
}

void DeclareCommunicationFlags(CLI::App& app, TrainerFlags& flags) {
  app.add_option("--gloo-allreduce", flags.gloo_allreduce,
                 "two-rank Gloo all-reduce: exchange (one round) or ring (Gloo's)")
      ->check(CLI::IsMember({"exchange", "ring"}))
      ->group("Communication");
  app.add_option("--min-buckets", flags.trainer.min_buckets,
                 "split gradients into at least this many buckets (each >= 64 KiB) so "
                 "a small model's all-reduce overlaps backward too (1: DDP's caps alone)")
      ->group("Communication");
  app.add_option_function<std::string>(
         "--collective-timeout",
         [&flags](const std::string& text) {
           flags.launch.collective_timeout =
               ParseDurationFlag("--collective-timeout", text);
         },
         "limit for forming the group and for each collective (300s, 5m or seconds); "
         "past it the rank aborts its communicator and exits with code 4. Keep it "
         "above the coordinator's stall threshold (60 s) so that the coordinator "
         "acts first")
      ->default_str(absl::FormatDuration(flags.launch.collective_timeout))
      ->group("Communication");
}

void DeclarePerformanceFlags(CLI::App& app, TrainerFlags& flags) {
  app.add_option_function<std::string>(
         "--checkpoint-writes",
         [&flags](const std::string& mode) {
           flags.trainer.checkpoint_async = mode == "async";
         },
         "async: snapshot the state at the step boundary and write it on a background "
         "thread while training goes on (the default); sync: write within the step "
         "(for comparison)")
      ->check(CLI::IsMember({"async", "sync"}))
      ->group("Performance");

  app.add_option_function<std::string>(
         "--cpu-kernels",
         [&flags](const std::string& kernels) {
           flags.trainer.cpu_kernels = kernels == "tessera";
         },
         "LayerNorm, GELU and Linear on CPU: tessera (vectorised loops; Linear on "
         "oneDNN; the default) or aten (LibTorch's kernels, for comparison)")
      ->check(CLI::IsMember({"tessera", "aten"}))
      ->group("Performance");
}

// The flags tessera-worker sets for each rank.
void DeclareLaunchFlags(CLI::App& app, LaunchOptions& l) {
  const std::string launch = "Launch (set by tessera-worker)";
  app.add_option("--coordinator", l.coordinator,
                 "coordinator HOST:PORT; omit for a standalone run")
      ->group(launch);
  app.add_option("--job-id", l.job_id, "job id")->group(launch);
  app.add_option("--attempt", l.attempt, "attempt number")->group(launch);
  app.add_option("--rank", l.rank, "this process's rank")->group(launch);
  app.add_option("--world-size", l.world_size, "number of ranks")->group(launch);
  app.add_option("--local-rank", l.local_rank, "rank within this machine")->group(launch);
  app.add_option("--credential-file", l.credential_file,
                 "file with this rank's coordinator credential; read once, then removed")
      ->group(launch);
  app.add_option("--profile-dir", l.profile_dir,
                 "folder for the step profile's trace.json and summary.json "
                 "(--profile-steps; default: the current folder)")
      ->group(launch);
  app.add_option("--metrics-file", l.metrics_file,
                 "also write every metric point to this file as JSON lines")
      ->group(launch);
  app.add_option("--rendezvous-store", l.rendezvous_store,
                 "without a coordinator: HOST:PORT of a TCPStore that rank 0 hosts "
                 "and all ranks join")
      ->group(launch);
}

// Declares every flag on `app`, bound to `flags`. Returns the names of the flags
// that carry TrainerConfig fields, in field order.
std::vector<std::string> DeclareFlags(CLI::App& app, TrainerFlags& flags) {
  app.option_defaults()->always_capture_default();
  ConfigFlags config(app);
  DeclareRunFlags(config, flags.trainer);
  DeclareOptimizationFlags(config, flags.trainer);
  DeclareScalingAndCheckpointFlags(config, flags.trainer);
  DeclareModelAndDeviceFlags(config, flags.trainer);
  DeclareImageAndFineTuningFlags(config, flags.trainer);
  DeclareEvaluationFlags(config, flags.trainer);
  DeclareSearchFlags(config, flags.trainer);
  DeclareCommunicationFlags(app, flags);
  DeclarePerformanceFlags(app, flags);
  DeclareLaunchFlags(app, flags.launch);
  return config.TakeNames();
}

}  // namespace

absl::StatusOr<TrainerFlags> ParseTrainerFlags(const std::vector<std::string>& args) {
  TrainerFlags flags;
  CLI::App app("tessera-train: data-parallel ViT training, one process per rank",
               "tessera-train");
  const std::vector<std::string> config_names = DeclareFlags(app, flags);
  // CLI11 consumes the argument vector from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    flags.help = app.help();
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  for (const std::string& name : config_names) {
    if (app.count("--" + name) > 0) flags.given.insert(name);
  }
  return flags;
}

const std::vector<std::string>& TrainerConfigFlagNames() {
  static const auto* const kNames = [] {
    CLI::App app;
    TrainerFlags flags;
    return new std::vector<std::string>(DeclareFlags(app, flags));
  }();
  return *kNames;
}

}  // namespace tessera::trainer
