// The data one run trains and evaluates on, behind one interface whatever its
// kind: the in-memory datasets (image_dataset.h: Fashion-MNIST, CIFAR,
// synthetic) and the image folders and tar shards that are decoded as they
// are read (image_data.h). The training loop sees only this: the shape, the
// normalisation, and loaders that turn sample ids into batches.
//
// Sample ids are indices into a split, [0, train_size), [0, test_size) or
// [0, val_size). Which
// ids a rank loads, and when, is decided by the loop (distributed_sampler.h,
// data_position.h), the same for every kind, so that every kind shuffles,
// shards and resumes alike.
//
// Implementations are immutable after construction and their loaders are
// thread-safe (the prefetcher calls them from several threads at once).
#ifndef TESSERA_WORKER_TRAINER_DATA_TRAINING_DATA_H_
#define TESSERA_WORKER_TRAINER_DATA_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

struct DataShape {
  int channels = 0;
  int num_classes = 0;
  int64_t train_size = 0;
  int64_t test_size = 0;
  // The validation split's size (0: the data has none; --eval-split val and
  // eval_every are then refused).
  int64_t val_size = 0;
  // Whether the test split is the validation split under another name (an
  // image folder without test/): the end-of-run metrics are then labelled val.
  bool test_is_val = false;
  // Class index -> name, num_classes of them (stored in checkpoints and written
  // beside them as classes.json, so that the mapping never shifts).
  std::vector<std::string> class_names;
};

// The number of samples in `split`.
int64_t SplitSize(const DataShape& shape, Split split);

// OK where the data has `split`; for a validation split it lacks,
// FailedPrecondition saying how to make one (--val-fraction, or val/).
absl::Status CheckHasSplit(const DataShape& shape, Split split);

class TrainingData {
 public:
  virtual ~TrainingData() = default;

  virtual const DataShape& shape() const = 0;
  // Whether the splits agree (channels, classes); InvalidArgument naming the
  // difference otherwise. The trainer checks before it starts.
  virtual absl::Status Check() const = 0;
  // Per-channel mean and deviation (of [0, 1] pixels) both splits are
  // normalised with.
  virtual ChannelStats stats() const = 0;
  // Whether training augmentation is on when the job leaves it unset.
  virtual bool augments_by_default() const = 0;
  // Samples skipped so far because they could not be read or decoded
  // (reported as the data_skipped metric); 0 for data held in memory.
  virtual int64_t skipped() const { return 0; }
  // A loader for `split` with these options (model input size, stage,
  // augmentation, seed, pinned memory). The loader may refer to this object,
  // which must outlive it.
  virtual std::unique_ptr<SampleLoader> MakeLoader(
      Split split, const BatchLoaderOptions& options) const = 0;
};

// The in-memory datasets as TrainingData: statistics computed over the
// training split, class names "0", "1", ... The datasets are not owned and
// must outlive it. `val` is the held-out validation split, or null for none.
// `stats`, where given, replaces the training split's statistics
// (OverrideChannelStats: trainer.mean and trainer.std).
class InMemoryData final : public TrainingData {
 public:
  InMemoryData(const ImageDataset& train, const ImageDataset& test,
               const std::string& dataset_name, const ImageDataset* val = nullptr,
               std::optional<ChannelStats> stats = std::nullopt);

  const DataShape& shape() const override { return shape_; }
  absl::Status Check() const override;
  ChannelStats stats() const override { return stats_; }
  bool augments_by_default() const override { return augments_; }
  std::unique_ptr<SampleLoader> MakeLoader(
      Split split, const BatchLoaderOptions& options) const override;

 private:
  const ImageDataset& train_;  // Not owned.
  const ImageDataset& test_;   // Not owned.
  const ImageDataset* val_;    // Not owned; null: no validation split.
  DataShape shape_;
  ChannelStats stats_;
  bool augments_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_TRAINING_DATA_H_
