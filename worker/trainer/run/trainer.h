// The data-parallel training loop of one rank.
//
// Run places the ViT on this rank's device (--device: CPU, or the CUDA device
// local_rank when LibTorch has CUDA), makes rank 0's initial parameters
// everyone's (broadcast), or resumes from the latest checkpoint, then for each
// optimizer step: loads grad_accum micro-batches of this rank's share of the
// data (training_data.h; which samples: distributed_sampler.h and
// data_position.h; on a GPU finished on the device: batch_feed.h), runs forward
// (under bf16/fp16 autocast on CUDA when asked) and cross-entropy (with label smoothing),
// and backward, during which the Reducer (reducer.h) all-reduces the gradients in buckets
// as they become ready (on the last micro-batch only); waits for the remaining buckets,
// optionally clips the global gradient norm and takes an AdamW or SGD step under a linear
// warmup + cosine schedule. fp16 scales the loss dynamically (loss_scaler.h)
// and skips steps whose gradients overflowed.
//
// Every metrics_every steps it reports the interval's mean loss, this rank's
// images/s and the per-step wall-clock breakdown (step_timer.h: time_data_ms,
// time_forward_ms, time_backward_ms, time_comm_ms for communication backward did
// not hide, time_optimizer_ms, time_step_ms), plus lr and epoch; after each epoch
// and at the end it evaluates on the test set, sharded across ranks with the
// counts summed over all ranks, so every rank reports the same test accuracy.
// With a checkpoint directory it checkpoints every checkpoint_every steps and at
// the end (checkpoint.h), with the global data position: a run resumes where
// it stopped at any world size (data_position.h); only the per-rank state (the
// random generators) is rebuilt when the world size changed. Finally it fingerprints the
// parameters (FNV-1a 64 over their bytes in registration order): ranks that trained in
// sync report equal hashes.
//
// Progress: the loop tells TrainerLoopOptions::progress (progress.h) every
// phase it enters (common/rank_phase.h) and every step it completes; waiting
// on peers is "collective" (the buckets' all-reduce at the end of backward,
// the initial broadcast, the evaluation's counts, checkpoint barriers).
//
// Preemption (preemption.h): once a rank's stop_requested flag is set, the
// ranks agree on a step to stop at (stop_agreement.h), checkpoint there
// (without evaluating) and Run returns with `preempted` set. The agreement
// costs no collective of its own: each rank's vote (1: stop) rides the step's
// gradient all-reduce as the reducer's control word (reducer.h), and every
// rank reads the same sum. On the CPU the ranks stop after the step that
// carried the vote; on CUDA one step later. A stop requested during the final
// step is ignored: the run completes.
//
// Run is a short sequence of named steps (trainer.cc's TrainingRun, the loop):
// plan the run (run_plan.h), build the model's replica (model_replica.h),
// resume (resume_point.h), plan the captured step, build the data feeds
// (training_feeds.h), then the loop of steps, with the schedule of
// lr_schedule.h, the metrics of interval_metrics.h and the checkpoints of
// checkpoint_publisher.h. The device placement, host settings and schedule
// that tessera-train and the tests call are declared in device_placement.h,
// host_runtime.h and lr_schedule.h, which this header includes.
// LibTorch stays out of this header; Run turns every c10::Error into a status. A
// Trainer runs once, on one thread; its collaborators must outlive it.
#ifndef TESSERA_WORKER_TRAINER_RUN_TRAINER_H_
#define TESSERA_WORKER_TRAINER_RUN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/run/device_placement.h"  // IWYU pragma: export
#include "worker/trainer/run/host_runtime.h"      // IWYU pragma: export
#include "worker/trainer/run/lr_schedule.h"       // IWYU pragma: export
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

class FaultInjector;
class ProgressTracker;
class TrainingData;

// Loop settings that are not part of the job's TrainerConfig.
struct TrainerLoopOptions {
  // With --warmup-steps=-1: linear warmup over this share of all steps.
  double warmup_fraction = 0.05;
  // The cosine decays to this share of the peak learning rate.
  double final_lr_fraction = 0.0;
  // Batch size for evaluation (no gradients, so larger than training's is fine).
  int eval_batch_size = 256;
  // This rank's index on its machine: its CUDA device when it trains on one.
  int local_rank = 0;
  // Complete checkpoints kept in the checkpoint directory (older ones removed).
  int checkpoint_keep = 2;
  // Set-up and summary lines; null: none. Not owned.
  std::ostream* log = nullptr;
  // Whether batches are finished (crop/flip, float conversion, normalisation,
  // resize) on the training device after a copy of the raw uint8 batch
  // (batch_feed.h) rather than by the loader threads on the host. Unset: on
  // the device exactly when it is a CUDA device. Tests set it to run the GPU
  // path's data pipeline on the CPU.
  std::optional<bool> finish_batches_on_device;
  // Where the loop reports its step and phase; null: nowhere. Not owned.
  ProgressTracker* progress = nullptr;
  // This rank's stop request (tessera-train: the SIGUSR1 flag); null: the
  // ranks never stop early. Every rank of a job must have one or none. Not
  // owned.
  const std::atomic<bool>* stop_requested = nullptr;
  // The --fault test hook; null: none. Not owned.
  FaultInjector* fault = nullptr;
  // Where a step profile (TrainerOptions::profile_steps) is written; empty:
  // the current folder.
  std::string profile_dir;
  // TEST HOOK: runs on the checkpoint writer's thread before it writes the
  // files of `step` (a test holds a write back with it); null: none.
  std::function<void(int64_t step)> before_checkpoint_write;
};

struct TrainingOutcome {
  int64_t steps = 0;  // optimizer steps done, including resumed ones
  // Stopped early on a stop request, after `steps` steps, at the same step as
  // every other rank; no final evaluation (test_* are 0).
  bool preempted = false;
  bool checkpointed = false;   // preempted with a checkpoint at `steps`
  int64_t resumed_from = 0;    // the checkpoint's step when resumed; 0 otherwise
  int resumed_world_size = 0;  // the world size that wrote that checkpoint
  int64_t skipped_steps = 0;   // fp16 steps skipped for overflowing gradients
  int64_t train_images = 0;    // images this rank trained on in this run
  double train_seconds = 0;    // wall time of this run's steps, without evaluation
  double test_accuracy = 0;    // final, over the whole test set
  double test_loss = 0;
  int64_t parameter_count = 0;
  std::string device;      // "cpu" or "cuda:N"
  std::string param_hash;  // 16 hex digits
};

class Trainer {
 public:
  // Trains on `data` (training_data.h). All references are not owned and must
  // outlive the trainer.
  Trainer(const TrainerOptions& options, const TrainingData& data,
          Communicator& communicator, MetricsReporter& reporter,
          TrainerLoopOptions loop = {});
  // Trains on in-memory splits (wrapped as InMemoryData).
  Trainer(const TrainerOptions& options, const ImageDataset& train,
          const ImageDataset& test, Communicator& communicator, MetricsReporter& reporter,
          TrainerLoopOptions loop = {});
  ~Trainer();

  // Trains and evaluates. FailedPrecondition when a rank's shard is smaller than
  // one optimizer step's micro-batches, or a checkpoint does not fit this run;
  // InvalidArgument for settings the device cannot run; a collective's status
  // when a peer fails; Internal for LibTorch errors.
  absl::StatusOr<TrainingOutcome> Run();

 private:
  const TrainerOptions options_;
  const TrainerLoopOptions loop_;
  std::unique_ptr<TrainingData> owned_data_;  // the in-memory constructor's
  const TrainingData& data_;                  // Not owned (unless owned_data_).
  Communicator& communicator_;                // Not owned.
  MetricsReporter& reporter_;                 // Not owned.
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TRAINER_H_
