// The last stage of batch preparation, written once for every device: from
// uint8 images at the dataset's native size to the model's float32 input. It
// applies each image's crop and flip (augmentation.h's transform, batched as
// one gather), scales to [0, 1], normalises each channel and resizes to the
// model's side length (bilinear or bicubic), all with tensor ops on the device
// the images are on. The CPU path runs it on the loader's threads
// (batch_loader.h); a CUDA rank runs it on its GPU after copying the uint8
// batch there (batch_feed.h), so only a quarter of the bytes (and none of the
// 224 px upsampling) crosses the bus or touches the host.
//
// An ImagePreprocessor is immutable after construction: any number of threads
// may use one at once.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_PREPROCESSOR_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_PREPROCESSOR_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "worker/trainer/data/augmentation.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

// The (shift_y, shift_x, flip) rows of `transforms`, as an int64 [n, 3] CPU
// tensor (pinned when `pin_memory`, for an asynchronous copy to a GPU).
at::Tensor TransformsTensor(const std::vector<ImageTransform>& transforms,
                            bool pin_memory = false);

// `images` (uint8 [batch, channels, height, width]) with image i transformed by
// row i of `transforms` (int64 [batch, 3]: shift_y, shift_x, flip; same device),
// exactly as ApplyImageTransform does it one image at a time: pixels come from
// the shifted (and mirrored) window, 0 where it leaves the image.
at::Tensor ApplyImageTransforms(const at::Tensor& images, const at::Tensor& transforms);

class ImagePreprocessor {
 public:
  // Normalises with `stats` (one mean and deviation per channel) and resizes to
  // image_size x image_size with `interpolation`. The statistics are kept on
  // `device`, which must be the device of the images it is given.
  //
  // The resize is torchvision 0.14's Resize(size, interpolation) on float
  // tensors (ToTensor first): torch's interpolate with align_corners=False, no
  // antialiasing, and no clamping or rounding to bytes (bicubic's overshoot
  // past the pixel range is kept). Image folders and shards instead resize the
  // uint8 crop as they decode it (crop_resize.h), as torchvision does uint8
  // tensors.
  ImagePreprocessor(const ChannelStats& stats, int image_size,
                    data::Interpolation interpolation = data::Interpolation::kBilinear,
                    c10::Device device = c10::Device(c10::kCPU));

  // uint8 [batch, channels, height, width] -> float32 [batch, channels, size,
  // size] on the same device. `transforms`, when defined, are applied first
  // (ApplyImageTransforms). Throws c10::Error on a shape or device mismatch.
  at::Tensor operator()(const at::Tensor& images,
                        const at::Tensor& transforms = {}) const;

  int image_size() const { return image_size_; }

 private:
  const int image_size_;
  const data::Interpolation interpolation_;
  at::Tensor mean_;     // float32 [1, C, 1, 1] on the device
  at::Tensor inv_std_;  // float32 [1, C, 1, 1] on the device
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_PREPROCESSOR_H_
