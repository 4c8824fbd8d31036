#include "worker/trainer/data/batch_loader.h"

#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {
namespace {

BatchLoaderOptions PlainOptions(int image_size) {
  BatchLoaderOptions options;
  options.image_size = image_size;
  return options;
}

}  // namespace

BatchLoader::BatchLoader(const ImageDataset& dataset, const ChannelStats& stats,
                         int image_size)
    : BatchLoader(dataset, stats, PlainOptions(image_size)) {}

BatchLoader::BatchLoader(const ImageDataset& dataset, const ChannelStats& stats,
                         const BatchLoaderOptions& options)
    : dataset_(dataset),
      options_(options),
      finish_(stats, options.image_size, options.interpolation) {}

absl::StatusOr<Batch> BatchLoader::Load(const std::vector<int64_t>& indices,
                                        int64_t begin, int64_t end, int64_t epoch) const {
  if (begin < 0 || begin > end || end > static_cast<int64_t>(indices.size())) {
    return absl::OutOfRangeError(absl::StrCat("batch range [", begin, ", ", end,
                                              ") is outside the ", indices.size(),
                                              " indices"));
  }
  const int64_t count = end - begin;
  const int64_t image_bytes = dataset_.image_bytes();
  const bool raw = options_.stage == BatchStage::kDevice;
  const auto host = torch::TensorOptions().pinned_memory(raw && options_.pin_memory);
  torch::Tensor images =
      torch::empty({count, dataset_.channels, dataset_.height, dataset_.width},
                   host.dtype(torch::kByte));
  torch::Tensor labels = torch::empty({count}, host.dtype(torch::kLong));
  std::vector<ImageTransform> transforms;
  if (raw && options_.augment) transforms.reserve(static_cast<size_t>(count));
  uint8_t* out = images.data_ptr<uint8_t>();
  int64_t* label_out = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[static_cast<size_t>(begin + i)];
    if (index < 0 || index >= dataset_.size()) {
      return absl::OutOfRangeError(absl::StrCat(
          "sample index ", index, " is outside the dataset of ", dataset_.size()));
    }
    const uint8_t* image = &dataset_.pixels[static_cast<size_t>(index * image_bytes)];
    uint8_t* slot = out + i * image_bytes;
    label_out[i] = dataset_.labels[static_cast<size_t>(index)];
    if (!options_.augment) {
      std::memcpy(slot, image, static_cast<size_t>(image_bytes));
      continue;
    }
    const ImageTransform transform =
        DrawImageTransform(options_.augmentation, options_.seed, epoch, index);
    if (raw) {  // applied on the device
      transforms.push_back(transform);
      std::memcpy(slot, image, static_cast<size_t>(image_bytes));
    } else {
      ApplyImageTransform(transform, dataset_.channels, dataset_.height, dataset_.width,
                          image, slot);
    }
  }
  if (raw) {
    Batch batch{images, labels, {}};
    if (options_.augment)
      batch.transforms = TransformsTensor(transforms, options_.pin_memory);
    return batch;
  }
  return Batch{finish_(images), labels, {}};
}

}  // namespace tessera::trainer
