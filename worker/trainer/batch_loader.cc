#include "worker/trainer/batch_loader.h"

#include <torch/torch.h>

#include <vector>

namespace tessera::trainer {

BatchLoader::BatchLoader(const ImageDataset& dataset, const ChannelStats& stats,
                         int image_size)
    : dataset_(dataset), image_size_(image_size) {
  // from_blob needs a mutable pointer; the tensors are only ever read.
  images_ = torch::from_blob(
      const_cast<uint8_t*>(dataset_.pixels.data()),
      {dataset_.size(), dataset_.channels, dataset_.height, dataset_.width},
      torch::kUInt8);
  labels_ = torch::from_blob(const_cast<int64_t*>(dataset_.labels.data()),
                             {dataset_.size()}, torch::kLong);
  std::vector<float> inv_std;
  for (const float s : stats.stddev) inv_std.push_back(1.0f / s);
  mean_ = torch::tensor(stats.mean).reshape({1, dataset_.channels, 1, 1});
  inv_std_ = torch::tensor(inv_std).reshape({1, dataset_.channels, 1, 1});
}

Batch BatchLoader::Load(const std::vector<int64_t>& indices, int64_t begin,
                        int64_t end) const {
  const torch::Tensor index = torch::from_blob(
      const_cast<int64_t*>(indices.data()) + begin, {end - begin}, torch::kLong);
  Batch batch;
  torch::Tensor images = images_.index_select(0, index).to(torch::kFloat).div_(255.0f);
  images.sub_(mean_).mul_(inv_std_);
  if (dataset_.height != image_size_ || dataset_.width != image_size_) {
    images = torch::nn::functional::interpolate(
        images, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{image_size_, image_size_})
                    .mode(torch::kBilinear)
                    .align_corners(false));
  }
  batch.images = images;
  batch.labels = labels_.index_select(0, index);
  return batch;
}

}  // namespace tessera::trainer
