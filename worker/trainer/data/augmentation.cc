#include "worker/trainer/data/augmentation.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tessera::trainer {
namespace {

// SplitMix64's finaliser: a fixed, well-mixed hash, so draws are the same on
// every platform and standard library.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) from the high 32 bits of `bits` (bias below 2^-24 for the
// small bounds used here).
int Below(uint64_t bits, int bound) {
  return static_cast<int>(((bits >> 32) * static_cast<uint64_t>(bound)) >> 32);
}

}  // namespace

ImageTransform DrawImageTransform(const AugmentationOptions& options, uint64_t seed,
                                  int64_t epoch, int64_t index) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  uint64_t state = Mix64(seed ^ 0x61756720ULL);  // "aug ": apart from other seed uses
  state = Mix64(state + kGolden * (static_cast<uint64_t>(epoch) + 1));
  state = Mix64(state + kGolden * (static_cast<uint64_t>(index) + 1));
  ImageTransform transform;
  const int pad = std::max(0, options.crop_padding);
  if (pad > 0) {
    transform.shift_y = Below(Mix64(state + 1 * kGolden), 2 * pad + 1) - pad;
    transform.shift_x = Below(Mix64(state + 2 * kGolden), 2 * pad + 1) - pad;
  }
  if (options.horizontal_flip) {
    transform.flip = (Mix64(state + 3 * kGolden) >> 63) != 0;
  }
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
