#include "worker/trainer/data/image_preprocessor.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tessera::trainer {
namespace {

torch::nn::functional::InterpolateFuncOptions::mode_t InterpolateMode(
    data::Interpolation interpolation) {
  if (interpolation == data::Interpolation::kBicubic) return torch::kBicubic;
  return torch::kBilinear;
}

}  // namespace

at::Tensor TransformsTensor(const std::vector<ImageTransform>& transforms,
                            bool pin_memory) {
  const auto n = static_cast<int64_t>(transforms.size());
  torch::Tensor rows = torch::empty(
      {n, 3}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_memory));
  int64_t* out = rows.data_ptr<int64_t>();
  for (const ImageTransform& t : transforms) {
    *out++ = t.shift_y;
    *out++ = t.shift_x;
    *out++ = t.flip ? 1 : 0;
  }
  return rows;
}

at::Tensor ApplyImageTransforms(const at::Tensor& images, const at::Tensor& transforms) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == torch::kByte,
              "images must be uint8 [batch, channels, height, width], got ",
              images.sizes(), " ", images.scalar_type());
  const int64_t batch = images.size(0);
  const int64_t channels = images.size(1);
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  TORCH_CHECK(transforms.dim() == 2 && transforms.size(0) == batch &&
                  transforms.size(1) == 3 && transforms.scalar_type() == torch::kLong,
              "transforms must be int64 [", batch, ", 3], got ", transforms.sizes(), " ",
              transforms.scalar_type());
  TORCH_CHECK(transforms.device() == images.device(), "transforms are on ",
              transforms.device(), ", images on ", images.device());
  const torch::TensorOptions index = transforms.options();
  const torch::Tensor shift_y = transforms.select(1, 0).view({batch, 1});
  const torch::Tensor shift_x = transforms.select(1, 1).view({batch, 1});
  const torch::Tensor flip = transforms.select(1, 2).view({batch, 1}).ne(0);
  // Source row and column of every output row and column, per image.
  const torch::Tensor columns = torch::arange(width, index).view({1, width});
  const torch::Tensor ys = torch::arange(height, index).view({1, height}) + shift_y;
  const torch::Tensor xs = torch::where(flip, columns.flip(1), columns) + shift_x;
  const torch::Tensor outside = (ys.lt(0) | ys.ge(height)).view({batch, height, 1}) |
                                (xs.lt(0) | xs.ge(width)).view({batch, 1, width});
  const torch::Tensor source = (ys.clamp(0, height - 1).view({batch, height, 1}) * width +
                                xs.clamp(0, width - 1).view({batch, 1, width}))
                                   .view({batch, 1, height * width});
  torch::Tensor out = images.reshape({batch, channels, height * width})
                          .gather(2, source.expand({batch, channels, height * width}));
  out.masked_fill_(outside.view({batch, 1, height * width}), 0);
  return out.view({batch, channels, height, width});
}

ImagePreprocessor::ImagePreprocessor(const ChannelStats& stats, int image_size,
                                     data::Interpolation interpolation,
                                     c10::Device device)
    : image_size_(image_size), interpolation_(interpolation) {
  std::vector<float> inv_std;
  for (const float s : stats.stddev) inv_std.push_back(1.0f / s);
  const auto channels = static_cast<int64_t>(stats.mean.size());
  mean_ = torch::tensor(stats.mean).reshape({1, channels, 1, 1}).to(device);
  inv_std_ = torch::tensor(inv_std).reshape({1, channels, 1, 1}).to(device);
}

at::Tensor ImagePreprocessor::operator()(const at::Tensor& images,
                                         const at::Tensor& transforms) const {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == mean_.size(1),
              "images must be [batch, ", mean_.size(1), ", height, width], got ",
              images.sizes());
  const torch::Tensor raw =
      transforms.defined() ? ApplyImageTransforms(images, transforms) : images;
  // Normalising before resizing is exact up to float rounding (the weights of
  // either interpolation sum to 1, and a float resize does not clamp) and
  // cheaper when the model's input is larger than the data.
  torch::Tensor out = raw.to(torch::kFloat).div_(255.0f);
  out.sub_(mean_).mul_(inv_std_);
  if (raw.size(2) != image_size_ || raw.size(3) != image_size_) {
    out = torch::nn::functional::interpolate(
        out, torch::nn::functional::InterpolateFuncOptions()
                 .size(std::vector<int64_t>{image_size_, image_size_})
                 .mode(InterpolateMode(interpolation_))
                 .align_corners(false));
  }
  return out;
}

}  // namespace tessera::trainer
