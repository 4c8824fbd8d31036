#include "worker/trainer/data/crop_resize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tessera::trainer::data {
namespace {

// Weights in 1/256ths: two taps of 8 bits multiply into 16 bits, rounded once.
constexpr uint32_t kOne = 256;

struct Tap {
  int first = 0;   // index of the first (lower) tap
  int second = 0;  // index of the second tap
  int weight = 0;  // of the second tap, in [0, kOne]
};

std::vector<Tap> Taps(double start, double length, int out, int limit) {
  std::vector<Tap> taps(static_cast<size_t>(out));
  const double step = length / out;
  for (int i = 0; i < out; ++i) {
    double pos = start + (i + 0.5) * step - 0.5;
    pos = std::clamp(pos, 0.0, static_cast<double>(limit - 1));
    const int first = static_cast<int>(pos);
    taps[i].first = first;
    taps[i].second = std::min(first + 1, limit - 1);
    taps[i].weight = static_cast<int>(std::lround((pos - first) * kOne));
  }
  return taps;
}

}  // namespace

void ResizeBoxToChw(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                    int out_width, int out_height, bool flip, uint8_t* out) {
  const std::vector<Tap> xs = Taps(box.x, box.width, out_width, src_width);
  const std::vector<Tap> ys = Taps(box.y, box.height, out_height, src_height);
  // Separable: each output row first blends its two source rows over the
  // columns the row's taps read (contiguous, vectorises), then blends columns.
  const int first_col = xs.front().first;
  const int cols = xs.back().second - first_col + 1;
  std::vector<uint16_t> blended(static_cast<size_t>(cols) * 3);
  std::vector<int> offsets(static_cast<size_t>(out_width) * 2);
  for (int ox = 0; ox < out_width; ++ox) {
    offsets[2 * ox] = 3 * (xs[ox].first - first_col);
    offsets[2 * ox + 1] = 3 * (xs[ox].second - first_col);
  }
  const size_t stride = size_t{3} * src_width;
  const size_t plane = static_cast<size_t>(out_width) * out_height;
  for (int oy = 0; oy < out_height; ++oy) {
    const uint8_t* top = src + ys[oy].first * stride + 3 * first_col;
    const uint8_t* bottom = src + ys[oy].second * stride + 3 * first_col;
    // 255 * 256 fits in 16 bits: the blend vectorises in 16-bit lanes.
    const auto wb = static_cast<uint16_t>(ys[oy].weight);
    const auto wt = static_cast<uint16_t>(kOne - wb);
    uint16_t* row = blended.data();
    const size_t n = blended.size();
    for (size_t i = 0; i < n; ++i) {
      row[i] = static_cast<uint16_t>(uint16_t{top[i]} * wt + uint16_t{bottom[i]} * wb);
    }
    uint8_t* r = out + static_cast<size_t>(oy) * out_width;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    for (int ox = 0; ox < out_width; ++ox) {
      const uint16_t* p = blended.data() + offsets[2 * ox];
      const uint16_t* q = blended.data() + offsets[2 * ox + 1];
      const uint32_t wx = static_cast<uint32_t>(xs[ox].weight);
      const int dst = flip ? out_width - 1 - ox : ox;
      r[dst] =
          static_cast<uint8_t>((p[0] * (kOne - wx) + q[0] * wx + kOne * kOne / 2) >> 16);
      g[dst] =
          static_cast<uint8_t>((p[1] * (kOne - wx) + q[1] * wx + kOne * kOne / 2) >> 16);
      b[dst] =
          static_cast<uint8_t>((p[2] * (kOne - wx) + q[2] * wx + kOne * kOne / 2) >> 16);
    }
  }
}

}  // namespace tessera::trainer::data
