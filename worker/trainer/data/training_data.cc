#include "worker/trainer/data/training_data.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::trainer {

int64_t SplitSize(const DataShape& shape, Split split) {
  switch (split) {
    case Split::kTrain:
      return shape.train_size;
    case Split::kTest:
      return shape.test_size;
    case Split::kVal:
      return shape.val_size;
  }
  return 0;
}

absl::Status CheckHasSplit(const DataShape& shape, Split split) {
  if (split != Split::kVal || shape.val_size > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this data has no validation split: hold one out of the training set with "
      "trainer.val_fraction (--val-fraction, e.g. 0.1), or give an image folder a val/ "
      "folder");
}

InMemoryData::InMemoryData(const ImageDataset& train, const ImageDataset& test,
                           const std::string& dataset_name, const ImageDataset* val,
                           std::optional<ChannelStats> stats)
    : train_(train),
      test_(test),
      val_(val),
      stats_(stats.has_value() ? *std::move(stats) : ComputeChannelStats(train)),
      augments_(AugmentsByDefault(dataset_name)) {
  shape_.channels = train.channels;
  shape_.num_classes = train.num_classes;
  shape_.train_size = train.size();
  shape_.test_size = test.size();
  shape_.val_size = val != nullptr ? val->size() : 0;
  for (int c = 0; c < train.num_classes; ++c)
    shape_.class_names.push_back(absl::StrCat(c));
}

absl::Status InMemoryData::Check() const {
  if (test_.channels != train_.channels || test_.num_classes != train_.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("train and test splits differ in shape: ", train_.channels,
                     " channels and ", train_.num_classes, " classes against ",
                     test_.channels, " and ", test_.num_classes));
  }
  return absl::OkStatus();
}

std::unique_ptr<SampleLoader> InMemoryData::MakeLoader(
    Split split, const BatchLoaderOptions& options) const {
  const ImageDataset& images = split == Split::kTrain                    ? train_
                               : split == Split::kVal && val_ != nullptr ? *val_
                                                                         : test_;
  return std::make_unique<BatchLoader>(images, stats_, options);
}

}  // namespace tessera::trainer
