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
  // A tap's second column is its first plus one, or equal to it with weight 0
  // at the right edge (Taps clamps): one spare pixel at the end of the blended
  // row lets every tap read first + 1, so the column pass needs one offset per
  // output pixel. The spare is zero and always weighted 0.
  std::vector<uint16_t> blended(static_cast<size_t>(cols + 1) * 3, 0);
  // Per output column in the order written (mirrored when flipping): the
  // blended-row offset of its first tap and the weight of its second.
  std::vector<int> offsets(static_cast<size_t>(out_width));
  std::vector<int> weights(static_cast<size_t>(out_width));
  for (int ox = 0; ox < out_width; ++ox) {
    const Tap& tap = xs[flip ? out_width - 1 - ox : ox];
    offsets[ox] = 3 * (tap.first - first_col);
    weights[ox] = tap.weight;
  }
  const size_t stride = size_t{3} * src_width;
  const size_t plane = static_cast<size_t>(out_width) * out_height;
  const size_t n = static_cast<size_t>(cols) * 3;
  for (int oy = 0; oy < out_height; ++oy) {
    const uint8_t* top = src + ys[oy].first * stride + 3 * first_col;
    const uint8_t* bottom = src + ys[oy].second * stride + 3 * first_col;
    // 255 * 256 fits in 16 bits: the blend vectorises in 16-bit lanes.
    const auto wb = static_cast<uint16_t>(ys[oy].weight);
    const auto wt = static_cast<uint16_t>(kOne - wb);
    uint16_t* row = blended.data();
    for (size_t i = 0; i < n; ++i) {
      row[i] = static_cast<uint16_t>(uint16_t{top[i]} * wt + uint16_t{bottom[i]} * wb);
    }
    uint8_t* r = out + static_cast<size_t>(oy) * out_width;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    // p * (1 - w) + q * w as p + (q - p) * w: one multiply per channel, the
    // same integers (signed: q - p may be negative, the sum is not).
    constexpr int kUnit = static_cast<int>(kOne);
    constexpr int kHalf = kUnit * kUnit / 2;
    for (int ox = 0; ox < out_width; ++ox) {
      const uint16_t* p = row + offsets[ox];
      const int w = weights[ox];
      r[ox] = static_cast<uint8_t>((p[0] * kUnit + (p[3] - p[0]) * w + kHalf) >> 16);
      g[ox] = static_cast<uint8_t>((p[1] * kUnit + (p[4] - p[1]) * w + kHalf) >> 16);
      b[ox] = static_cast<uint8_t>((p[2] * kUnit + (p[5] - p[2]) * w + kHalf) >> 16);
    }
  }
}

}  // namespace tessera::trainer::data
