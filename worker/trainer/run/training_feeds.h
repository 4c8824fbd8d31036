// A training run's data feeds: this rank's training micro-batches, in the
// order of the run's epoch plan from the position it starts at
// (data_position.h), loaded ahead by the prefetcher's threads
// (batch_prefetcher.h) and handed over on the training device (batch_feed.h);
// and the test split's loader and feed, for evaluation. Both splits are
// normalised alike. On a GPU the loaders only gather uint8 images (into pinned
// memory), which the feeds copy over and finish there; on the CPU the loaders
// finish them.
//
// Use: TrainingFeeds::Create once the run's start and length are known; the
// loop takes train().Next() once per micro-batch; an evaluation loads test
// batches with test_loader() and moves each with test().ToDevice.
//
// Thread-safety: the prefetcher's threads load ahead on their own; the feeds
// belong to the training loop's thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_TRAINING_FEEDS_H_
#define TESSERA_WORKER_TRAINER_RUN_TRAINING_FEEDS_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "worker/trainer/data/batch_feed.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/batch_prefetcher.h"
#include "worker/trainer/data/data_position.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/run/device_placement.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

// Which micro-batches a run trains on, and where.
struct FeedPlan {
  const DistributedSampler* sampler = nullptr;  // the training split's; Not owned
  const EpochPlan* epochs = nullptr;            // Not owned
  DataPosition start;                           // of the run's first micro-batch
  int64_t micro_batches = 0;                    // the run's, from `start` on
  int rank = 0;
  int image_size = 28;  // the model's input size
  DevicePlacement placement;
  // Batches finished on the training device after a copy of the raw uint8
  // batch, rather than by the loader threads; unset: exactly on a CUDA device.
  std::optional<bool> finish_on_device;
};

class TrainingFeeds {
 public:
  // The loaders of `data` with the options' augmentation, seed and data
  // workers; the prefetcher starts loading at once. `data` and the plan's
  // sampler and epochs must outlive the feeds.
  static std::unique_ptr<TrainingFeeds> Create(const TrainingData& data,
                                               const TrainerOptions& options,
                                               const FeedPlan& plan);
  ~TrainingFeeds();
  TrainingFeeds(const TrainingFeeds&) = delete;
  TrainingFeeds& operator=(const TrainingFeeds&) = delete;

  // The run's training micro-batches, in order, on the training device.
  BatchFeed& train() { return *train_feed_; }
  // The test split's batches, and their way to the training device.
  const SampleLoader& test_loader() const { return *test_loader_; }
  // The loader of kTest, or of kVal where the data has a validation split
  // (else null); both move through test().
  const SampleLoader* held_out_loader(Split split) const {
    return split == Split::kVal ? val_loader_.get() : test_loader_.get();
  }
  BatchFeed& test() { return *test_feed_; }

 private:
  TrainingFeeds() = default;

  std::unique_ptr<SampleLoader> train_loader_;
  std::unique_ptr<SampleLoader> test_loader_;
  std::unique_ptr<SampleLoader> val_loader_;  // null: no validation split
  std::unique_ptr<BatchPrefetcher> train_batches_;
  std::unique_ptr<BatchFeed> train_feed_;
  std::unique_ptr<BatchFeed> test_feed_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TRAINING_FEEDS_H_
