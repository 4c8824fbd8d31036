#include "worker/trainer/data/augmentation.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer {

ImageTransform DrawImageTransform(const AugmentationOptions& options, uint64_t seed,
                                  int64_t epoch, int64_t index) {
  // Three draws in a fixed order whichever parts are on, so that turning one
  // part off leaves the others' draws as they were.
  data::SampleRng rng(seed, epoch, index);
  const int pad = std::max(0, options.crop_padding);
  const auto shift_y = static_cast<int>(rng.UniformInt(-pad, pad));
  const auto shift_x = static_cast<int>(rng.UniformInt(-pad, pad));
  const bool flip = (rng.Next() >> 63) != 0;
  ImageTransform transform;
  if (pad > 0) {
    transform.shift_y = shift_y;
    transform.shift_x = shift_x;
  }
  transform.flip = options.horizontal_flip && flip;
  return transform;
}

void ApplyImageTransform(const ImageTransform& t, int channels, int height, int width,
                         const uint8_t* in, uint8_t* out) {
  const int64_t plane = int64_t{height} * width;
  for (int c = 0; c < channels; ++c) {
    const uint8_t* src = in + c * plane;
    uint8_t* dst = out + c * plane;
    for (int y = 0; y < height; ++y) {
      uint8_t* row = dst + int64_t{y} * width;
      const int sy = y + t.shift_y;
      if (sy < 0 || sy >= height) {
        std::memset(row, 0, static_cast<size_t>(width));
        continue;
      }
      const uint8_t* src_row = src + int64_t{sy} * width;
      for (int x = 0; x < width; ++x) {
        const int sx = (t.flip ? width - 1 - x : x) + t.shift_x;
        row[x] = sx >= 0 && sx < width ? src_row[sx] : 0;
      }
    }
  }
}

}  // namespace tessera::trainer
