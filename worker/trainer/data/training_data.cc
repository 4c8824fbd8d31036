#include "worker/trainer/data/training_data.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::trainer {

InMemoryData::InMemoryData(const ImageDataset& train, const ImageDataset& test,
                           const std::string& dataset_name)
    : train_(train),
      test_(test),
      stats_(ComputeChannelStats(train)),
      augments_(AugmentsByDefault(dataset_name)) {
  shape_.channels = train.channels;
  shape_.num_classes = train.num_classes;
  shape_.train_size = train.size();
  shape_.test_size = test.size();
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
  return std::make_unique<BatchLoader>(split == Split::kTrain ? train_ : test_, stats_,
                                       options);
}

}  // namespace tessera::trainer
