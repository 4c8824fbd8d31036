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
// Run is a short sequence of named steps (trainer.cc's TrainingRun): plan,
// build the model, resume, build the data feeds, then the loop of steps.
// LibTorch stays in the .cc; Run turns every c10::Error into a status. A Trainer
// runs once, on one thread; its collaborators must outlive it.
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

// Where a rank trains.
struct DevicePlacement {
  bool cuda = false;
  int index = -1;            // CUDA device index; -1 on the CPU
  std::string name() const;  // "cpu" or "cuda:N"
};

// Resolves --device for the rank with this local rank: "cpu"; "cuda" (the
// device CudaDeviceForLocalRank picks; FailedPrecondition when LibTorch has no
// CUDA or no device is visible); "auto" (CUDA when possible, else the CPU).
// InvalidArgument when --precision bf16/fp16 meets a CPU placement: mixed
// precision runs only under CUDA autocast here.
absl::StatusOr<DevicePlacement> ResolveDevice(const TrainerOptions& options,
                                              int local_rank);

// The CUDA device of the rank with `local_rank` when `visible` devices are
// visible: device local_rank when several are (one per local rank), device 0
// when one is (the launcher gave each rank its own through
// CUDA_VISIBLE_DEVICES). FailedPrecondition when several are visible but not
// local_rank + 1: ranks must not share a GPU by accident.
absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank, int visible);

// Makes the placement's CUDA device current for the calling thread (a no-op on
// the CPU). tessera-train calls it right after ResolveDevice, before anything
// else touches CUDA (NCCL, the model), so that no context is created on a GPU
// of another rank.
absl::Status MakePlacementCurrent(const DevicePlacement& placement);

// Makes glibc keep freed tensor memory in the heap (allocations below 64 MiB
// are not mmap'ed, and up to 256 MiB of free heap top is kept) instead of
// handing it back to the kernel after every step and faulting in fresh zeroed
// pages on the next: with default settings a CPU step's activations churn
// through mmap/munmap and page faults that cost ~20% of backward for vit-micro.
// Larger blocks are still mapped afresh each time (as is anything a loader
// thread's arena cannot hold, 64 MiB per heap): a float32 batch at 224 px of a
// CPU run. A CUDA rank has no such batches on the host: its loaders fill small
// uint8 batches in pinned memory, which LibTorch's host allocator caches.
// Process-wide; tessera-train calls it once at start-up. Returns whether glibc
// took both settings; false without glibc.
bool ConfigureHostAllocator();

// Sets LibTorch's intra-op thread count and, when the BLAS library is OpenBLAS,
// its thread count too (OpenBLAS otherwise starts one thread per core in every
// rank and oversubscribes the machine).
void ConfigureComputeThreads(int threads);

// The warmup length: `warmup_steps`, or ceil(warmup_fraction * total_steps) when
// it is -1.
int64_t ResolveWarmupSteps(int64_t warmup_steps, int64_t total_steps,
                           double warmup_fraction);

// The learning rate at 0-based `step` of `total_steps`: linear warmup to `peak`
// over `warmup_steps`, then cosine decay to peak * final_lr_fraction.
double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             int64_t warmup_steps, double final_lr_fraction);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TRAINER_H_
