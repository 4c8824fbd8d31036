// Settings of one tessera-train process: what to train (TrainerOptions, which
// mirrors tessera.v1.TrainerConfig field by field) and where this process sits in
// the job (LaunchOptions: coordinator address, job, attempt, rank, world size).
//
// main.cc fills both from flags (trainer_flags.h) and validates them here before
// anything else runs. Plain structs and pure functions: thread-compatible.
#ifndef TESSERA_WORKER_TRAINER_RUN_TRAINER_OPTIONS_H_
#define TESSERA_WORKER_TRAINER_RUN_TRAINER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/dist/launch_options.h"

namespace tessera::trainer {

// One field per tessera.v1.TrainerConfig field, same name and meaning. The
// defaults are what the trainer uses when the worker leaves a field unset.
struct TrainerOptions {
  std::string model = "vit-micro";        // preset name, see vit_config.h
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "synthetic"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int32_t epochs = 1;               // passes over the rank's shard
  int64_t max_steps = 0;            // stop after this many optimizer steps; 0: no limit
  int32_t batch_size = 64;          // per rank
  double lr = 1e-3;                 // peak AdamW learning rate
  int64_t train_subset = 0;         // use only the first N training samples; 0: all
  int64_t test_subset = 0;          // use only the first N test samples; 0: all
  bool allreduce = true;            // average gradients across ranks
  int32_t metrics_every = 10;       // report metrics every K optimizer steps
  int64_t seed = 0;                 // init, shuffling and synthetic data
  int32_t threads = 1;              // intra-op threads; 0: the trainer default (1)
  double weight_decay = 0.05;       // AdamW decoupled weight decay
  std::string optimizer = "adamw";  // "adamw" | "sgd" | "lamb"
  double momentum = 0.9;            // SGD momentum
  int64_t warmup_steps = -1;        // linear warmup steps; -1: 5% of the run
  double label_smoothing = 0.0;     // in [0, 1)
  int32_t grad_accum = 1;           // micro-batches per optimizer step
  double clip_grad_norm = 0.0;      // max global gradient norm; 0: no clipping
  std::string precision = "fp32";   // "fp32" | "bf16" | "fp16" (the last two on CUDA)
  std::string scaling = "strong";   // "strong" | "weak"
  double weak_fraction = 0.1;       // weak scaling: training-set fraction per rank
  std::string checkpoint_dir;       // empty: no checkpoints
  int64_t checkpoint_every = 0;     // steps between checkpoints; 0: only at the end
  bool resume = false;              // continue from the latest checkpoint
  double dropout = 0.0;             // dropout probability
  double bucket_cap_mb = 25.0;      // gradient bucket size (MiB), as DDP
  int32_t image_size = 0;           // model input size; 0: the preset's
  std::optional<bool> augment;      // crop + flip; unset: on for CIFAR, off otherwise
  std::string device = "auto";      // "auto" | "cpu" | "cuda"
  int32_t data_workers = 2;         // background data loading threads
  double first_bucket_mb = 1.0;     // first (last-layer) bucket size (MiB), as DDP
  bool overlap = true;              // allreduce buckets during backward
  // TEST HOOK (common/fault_spec.h): make one rank hang or dawdle; empty: off.
  std::string fault;
  // Image data (imagefolder, shards): normalisation per RGB channel (empty:
  // ImageNet's), the evaluation crop, the share of unreadable samples allowed.
  std::vector<double> mean;
  std::vector<double> std;
  double crop_fraction = 0.875;
  double data_max_skipped = 0.01;
  // Fine-tuning: pretrained weights (safetensors) and their names' layout,
  // layer-wise learning-rate decay (1: off) and head-only warm-up steps.
  std::string init_from;
  std::string init_names = "auto";
  double layer_decay = 1.0;
  int64_t head_warmup_steps = 0;
  // Step profile: record these optimizer steps ("A-B", counted from 1;
  // step_profiler.h) and write a trace and a table; empty: off.
  std::string profile_steps;
  // Capture each training step in a CUDA graph and replay it (cuda_graph.h):
  // "auto" where the run allows it (naming what stops it otherwise), "on"
  // (a run that does not allow it fails), "off". Off by default until the GPU
  // check has compared captured and eager steps on a GPU (docs/performance.md, on a GPU).
  std::string cuda_graph = "off";
  // ZeRO stage (dist/zero_optimizer.h): 0 replicates the optimizer state on
  // every rank (DDP); 1 shards it over the ranks, each updating its shard of
  // the parameters and all-gathering the rest; 2 also reduce-scatters the
  // gradients so each rank keeps only its shard's. One of kZeroStageChoices.
  int32_t zero_stage = 0;
  // Evaluation only (evaluation.h): evaluate the model of init_from, or of the
  // checkpoint in checkpoint_dir (resume; eval_step, or the latest when 0), on
  // eval_split ("test", "val": the same held-out split, or "train"); no training.
  bool eval_only = false;
  std::string eval_split = "test";
  int64_t eval_step = 0;
  // Validation (validation_split.h): hold out this fraction of an in-memory
  // training set, by class, with its own seed (0: none; image folders have
  // val/); score it every eval_every steps (0: only at the end).
  double val_fraction = 0.0;
  int64_t val_seed = 0;
  int64_t eval_every = 0;
  // The resize to the model's input size, one of kInterpolationChoices: of
  // every crop of image data, and of in-memory images of another size.
  std::string interpolation = "bilinear";
  // Optimizer knobs (model/optimizers.h): AdamW's betas and epsilon, LAMB's
  // trust-ratio bounds and whether groups without weight decay take it too.
  std::vector<double> adam_betas;  // empty: 0.9 0.999
  double adam_eps = 1e-8;
  double lamb_max_trust = 10.0;
  double lamb_min_trust = 0.0;
  bool lamb_trust_when_no_decay = false;
  // Train only this fraction of the run's steps, checkpoint and stop; the
  // schedule stays the whole run's (a search's rungs; 0: the whole run).
  double stop_fraction = 0.0;
  // Not a TrainerConfig field (set by flag only): split small models into at
  // least this many buckets so their communication overlaps backward too.
  int32_t min_buckets = 1;
  // Not a TrainerConfig field either: LayerNorm and GELU on tessera's CPU
  // kernels (true) or LibTorch's (false); see fused_layers.h.
  bool cpu_kernels = true;
  // Not a TrainerConfig field either: write checkpoints on a background thread
  // while training goes on (true), or within the step (false, for comparison).
  bool checkpoint_async = true;
};

// Largest values accepted from the command line.
struct OptionLimits {
  int32_t max_batch_size = 65536;
  int32_t max_epochs = 100000;
  int32_t max_threads = 1024;
  int32_t max_world_size = 4096;
  absl::Duration min_collective_timeout = absl::Seconds(1);
  absl::Duration max_collective_timeout = absl::Hours(24);
};

// Range and consistency checks on the trainer settings; InvalidArgument naming the
// flag on failure, e.g. "--batch-size must be in [1, 65536], got 0".
absl::Status ValidateTrainerOptions(const TrainerOptions& options,
                                    const OptionLimits& limits = {});

// The image-data and fine-tuning options (part of ValidateTrainerOptions).
absl::Status ValidateDataAndInit(const TrainerOptions& options);
// The step profile, CUDA graph and ZeRO options (part of ValidateDataAndInit).
absl::Status ValidateStepOptions(const TrainerOptions& options);
// The validation split, the stop fraction and the optimizer knobs (part of
// ValidateEvalOptions).
absl::Status ValidateSearchKeys(const TrainerOptions& options);
// The evaluation-only options (part of ValidateDataAndInit): a split the data
// offers, and exactly one model source (--init-from, or --resume with
// --checkpoint-dir); --eval-step only with --resume.
absl::Status ValidateEvalOptions(const TrainerOptions& options);

// Checks the launch settings. `coordinator_supported` is false in builds without
// gRPC (TESSERA_TRAINER_ONLY), where --coordinator is rejected.
absl::Status ValidateLaunchOptions(const LaunchOptions& launch,
                                   bool coordinator_supported,
                                   const OptionLimits& limits = {});

// The intra-op thread count to use: `threads`, or the default (1) when it is 0.
int EffectiveThreads(const TrainerOptions& options);

// The resize `interpolation` names (validated with the options; bilinear for a
// name it does not know).
data::Interpolation EffectiveInterpolation(const TrainerOptions& options);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TRAINER_OPTIONS_H_
