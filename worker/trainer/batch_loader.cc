#include "worker/trainer/batch_loader.h"

#include <torch/torch.h>

#include <cstring>
#include <vector>

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
    : dataset_(dataset), options_(options) {
  std::vector<float> inv_std;
  for (const float s : stats.stddev) inv_std.push_back(1.0f / s);
  mean_ = torch::tensor(stats.mean).reshape({1, dataset_.channels, 1, 1});
  inv_std_ = torch::tensor(inv_std).reshape({1, dataset_.channels, 1, 1});
}

Batch BatchLoader::Load(const std::vector<int64_t>& indices, int64_t begin, int64_t end,
                        int64_t epoch) const {
  TORCH_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(indices.size()),
              "batch range [", begin, ", ", end, ") is outside the ", indices.size(),
              " indices");
  const int64_t count = end - begin;
  const int64_t image_bytes = dataset_.image_bytes();
  torch::Tensor raw = torch::empty(
      {count, dataset_.channels, dataset_.height, dataset_.width}, torch::kUInt8);
  torch::Tensor labels = torch::empty({count}, torch::kLong);
  uint8_t* out = raw.data_ptr<uint8_t>();
  int64_t* label_out = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[static_cast<size_t>(begin + i)];
    TORCH_CHECK(index >= 0 && index < dataset_.size(), "sample index ", index,
                " is outside the dataset of ", dataset_.size());
    const uint8_t* image = &dataset_.pixels[static_cast<size_t>(index * image_bytes)];
    uint8_t* slot = out + i * image_bytes;
    if (options_.augment) {
      ApplyImageTransform(
          DrawImageTransform(options_.augmentation, options_.seed, epoch, index),
          dataset_.channels, dataset_.height, dataset_.width, image, slot);
    } else {
      std::memcpy(slot, image, static_cast<size_t>(image_bytes));
    }
    label_out[i] = dataset_.labels[static_cast<size_t>(index)];
  }

  // Normalising before resizing is exact (bilinear weights sum to 1) and cheaper
  // when the model's input is larger than the data.
  torch::Tensor images = raw.to(torch::kFloat).div_(255.0f);
  images.sub_(mean_).mul_(inv_std_);
  const int size = options_.image_size;
  if (dataset_.height != size || dataset_.width != size) {
    images = torch::nn::functional::interpolate(
        images, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{size, size})
                    .mode(torch::kBilinear)
                    .align_corners(false));
  }
  return Batch{images, labels};
}

}  // namespace tessera::trainer
