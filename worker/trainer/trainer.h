// The data-parallel training loop of one rank.
//
// Run builds the ViT for the dataset, makes rank 0's initial parameters
// everyone's (broadcast), then for each step: loads this rank's batch (see
// distributed_sampler.h), runs forward, cross-entropy and backward, averages the
// gradients across ranks (one flat all-reduce of all gradients, when allreduce is
// on) and takes an AdamW step under a warmup + cosine learning-rate schedule.
// Every metrics_every steps it reports the interval's mean loss, this rank's
// images/s, the mean step time and the time spent in the all-reduce; after each
// epoch and at the end it evaluates on the test set, sharded across ranks with the
// counts summed over all ranks, so every rank reports the same test accuracy.
// Finally it fingerprints the parameters (FNV-1a 64 over their bytes in
// registration order): ranks that trained in sync report equal hashes.
//
// LibTorch stays in the .cc; Run turns every c10::Error into a status. A Trainer
// runs once, on one thread; its collaborators must outlive it.
#ifndef TESSERA_WORKER_TRAINER_TRAINER_H_
#define TESSERA_WORKER_TRAINER_TRAINER_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "worker/trainer/communicator.h"
#include "worker/trainer/image_dataset.h"
#include "worker/trainer/metrics_reporter.h"
#include "worker/trainer/trainer_options.h"

namespace tessera::trainer {

// Loop settings that are not part of the job's TrainerConfig.
struct TrainerLoopOptions {
  // Linear warmup over this share of all steps, then cosine decay.
  double warmup_fraction = 0.05;
  // The cosine decays to this share of the peak learning rate.
  double final_lr_fraction = 0.0;
  // Batch size for evaluation (no gradients, so larger than training's is fine).
  int eval_batch_size = 256;
  // Set-up and summary lines; null: none. Not owned.
  std::ostream* log = nullptr;
};

struct TrainingOutcome {
  int64_t steps = 0;         // optimizer steps taken
  int64_t train_images = 0;  // images this rank trained on
  double train_seconds = 0;  // wall time of the training steps, without evaluation
  double test_accuracy = 0;  // final, over the whole test set
  double test_loss = 0;
  int64_t parameter_count = 0;
  std::string param_hash;  // 16 hex digits
};

class Trainer {
 public:
  // All references are not owned and must outlive the trainer.
  Trainer(const TrainerOptions& options, const ImageDataset& train,
          const ImageDataset& test, Communicator& communicator, MetricsReporter& reporter,
          TrainerLoopOptions loop = {});

  // Trains and evaluates. FailedPrecondition when a rank's shard is smaller than
  // one batch; a collective's status when a peer fails; Internal for LibTorch
  // errors.
  absl::StatusOr<TrainingOutcome> Run();

 private:
  const TrainerOptions options_;
  const TrainerLoopOptions loop_;
  const ImageDataset& train_;   // Not owned.
  const ImageDataset& test_;    // Not owned.
  Communicator& communicator_;  // Not owned.
  MetricsReporter& reporter_;   // Not owned.
};

// Sets LibTorch's intra-op thread count and, when the BLAS library is OpenBLAS,
// its thread count too (OpenBLAS otherwise starts one thread per core in every
// rank and oversubscribes the machine).
void ConfigureComputeThreads(int threads);

// The learning rate at 0-based `step` of `total_steps` under the loop's schedule.
double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             const TrainerLoopOptions& loop);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_TRAINER_H_
