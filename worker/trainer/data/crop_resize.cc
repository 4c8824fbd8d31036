#include "worker/trainer/data/crop_resize.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tessera::trainer::data {
namespace {

// Weights in 1/256ths: two taps of 8 bits multiply into 16 bits, rounded once.
constexpr uint32_t kOne = 256;
constexpr int kUnit = static_cast<int>(kOne);
constexpr int kHalf = kUnit * kUnit / 2;  // rounds the final >> 16

// The blended row holds each vertical blend (0..255 * 256, 16 bits unsigned)
// offset by -32768, so that it reads as a signed 16-bit value: the SSE2
// column pass multiplies pairs of them with signed 16-bit products (pmaddwd).
constexpr uint16_t kBias = 0x8000;

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

// Per output column, in the order written (mirrored when flipping): where its
// first tap's pixel starts in the blended row, and its two weights.
struct ColumnTaps {
  std::vector<int> offsets;  // in 16-bit values: 3 * (first tap - first column)
  std::vector<int> weights;  // of the second tap, in [0, kOne]
};

// One output row, every channel: out = (p * (kOne - w) + q * w + kHalf) >> 16
// for the blended pixels p (at the column's offset) and q (the next pixel).
void ColumnPassScalar(const uint16_t* row, const ColumnTaps& taps, int begin, int end,
                      uint8_t* r, uint8_t* g, uint8_t* b) {
  for (int ox = begin; ox < end; ++ox) {
    const uint16_t* p = row + taps.offsets[ox];
    const int w = taps.weights[ox];
    uint8_t* planes[3] = {r, g, b};
    for (int c = 0; c < 3; ++c) {
      const int first = p[c] ^ kBias;
      const int second = p[c + 3] ^ kBias;
      planes[c][ox] =
          static_cast<uint8_t>((first * kUnit + (second - first) * w + kHalf) >> 16);
    }
  }
}

#if defined(__SSE2__)
// A column's weights as pmaddwd multiplies them: (kOne - w, w) per channel.
struct PairWeights {
  int16_t lanes[8];
};

// The column pass four pixels at a time: each pixel's two taps are paired per
// channel (R R' G G' B B') and multiplied with (kOne - w, w) in one pmaddwd,
// which gives the pixel's three sums; four pixels' sums are transposed into
// channel order. The same integers as ColumnPassScalar: the bias each
// product carries is added back before the shift.
inline __m128i PixelSums(const uint16_t* row, int offset, const __m128i& weights) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + offset));
  const __m128i pairs = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 6));
  return _mm_madd_epi16(pairs, weights);  // R, G, B, 0 (each less the bias)
}

// Returns the four pixels' 16-bit R, G and B sums, shifted to 0..255: R in
// lanes 0-3 of *rg, G in lanes 4-7, B in lanes 0-3 of *bb.
inline void FourPixels(const uint16_t* row, const int* offsets,
                       const PairWeights* weights, __m128i* rg, __m128i* bb) {
  const __m128i unbias = _mm_set1_epi32(int{kBias} * kUnit + kHalf);
  __m128i s[4];
  for (int k = 0; k < 4; ++k) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(weights[k].lanes));
    s[k] = _mm_add_epi32(PixelSums(row, offsets[k], w), unbias);
  }
  const __m128i t0 = _mm_unpacklo_epi32(s[0], s[1]);  // R0 R1 G0 G1
  const __m128i t1 = _mm_unpacklo_epi32(s[2], s[3]);  // R2 R3 G2 G3
  const __m128i t2 = _mm_unpackhi_epi32(s[0], s[1]);  // B0 B1 0 0
  const __m128i t3 = _mm_unpackhi_epi32(s[2], s[3]);  // B2 B3 0 0
  const __m128i red = _mm_srli_epi32(_mm_unpacklo_epi64(t0, t1), 16);
  const __m128i green = _mm_srli_epi32(_mm_unpackhi_epi64(t0, t1), 16);
  const __m128i blue = _mm_srli_epi32(_mm_unpacklo_epi64(t2, t3), 16);
  *rg = _mm_packs_epi32(red, green);
  *bb = _mm_packs_epi32(blue, blue);
}

void ColumnPass(const uint16_t* row, const ColumnTaps& taps, const PairWeights* weights,
                int out_width, uint8_t* r, uint8_t* g, uint8_t* b) {
  int ox = 0;
  for (; ox + 8 <= out_width; ox += 8) {
    __m128i rg0, b0, rg1, b1;
    FourPixels(row, &taps.offsets[ox], &weights[ox], &rg0, &b0);
    FourPixels(row, &taps.offsets[ox + 4], &weights[ox + 4], &rg1, &b1);
    // 16-bit R0-3 G0-3 | R4-7 G4-7 -> bytes R0-7, G0-7.
    const __m128i red = _mm_unpacklo_epi64(rg0, rg1);
    const __m128i green = _mm_unpackhi_epi64(rg0, rg1);
    const __m128i rg_bytes = _mm_packus_epi16(red, green);
    const __m128i b_bytes = _mm_packus_epi16(_mm_unpacklo_epi64(b0, b1), b0);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(r + ox), rg_bytes);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(g + ox), _mm_srli_si128(rg_bytes, 8));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(b + ox), b_bytes);
  }
  ColumnPassScalar(row, taps, ox, out_width, r, g, b);
}
#endif

void ResizeBilinear(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                    int out_width, int out_height, bool flip, uint8_t* out) {
  const std::vector<Tap> xs = Taps(box.x, box.width, out_width, src_width);
  const std::vector<Tap> ys = Taps(box.y, box.height, out_height, src_height);
  // Separable: each output row first blends its two source rows over the
  // columns the row's taps read (contiguous, vectorises), then blends columns.
  const int first_col = xs.front().first;
  const int cols = xs.back().second - first_col + 1;
  // A tap's second column is its first plus one, or equal to it with weight 0
  // at the right edge (Taps clamps): spare pixels at the end of the blended
  // row let every tap read first + 1 (and the SSE2 pass read 8 values from its
  // first), so the column pass needs one offset per output pixel. The spares
  // are always weighted 0.
  std::vector<uint16_t> blended(static_cast<size_t>(cols) * 3 + 8, kBias);
  ColumnTaps taps;
  taps.offsets.resize(static_cast<size_t>(out_width));
  taps.weights.resize(static_cast<size_t>(out_width));
  for (int ox = 0; ox < out_width; ++ox) {
    const Tap& tap = xs[flip ? out_width - 1 - ox : ox];
    taps.offsets[ox] = 3 * (tap.first - first_col);
    taps.weights[ox] = tap.weight;
  }
#if defined(__SSE2__)
  std::vector<PairWeights> weights(static_cast<size_t>(out_width));
  for (int ox = 0; ox < out_width; ++ox) {
    const auto w = static_cast<int16_t>(taps.weights[ox]);
    const auto wt = static_cast<int16_t>(kUnit - w);
    weights[ox] = PairWeights{{wt, w, wt, w, wt, w, 0, 0}};
  }
#endif
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
      row[i] = static_cast<uint16_t>((uint16_t{top[i]} * wt + uint16_t{bottom[i]} * wb) ^
                                     kBias);
    }
    uint8_t* r = out + static_cast<size_t>(oy) * out_width;
#if defined(__SSE2__)
    ColumnPass(row, taps, weights.data(), out_width, r, r + plane, r + 2 * plane);
#else
    ColumnPassScalar(row, taps, 0, out_width, r, r + plane, r + 2 * plane);
#endif
  }
}

// ---- bicubic ----
// The arithmetic is torch's (aten/src/ATen/native/UpSample.h and the CPU
// kernel's nested loop), step for step in float32, so that a resize of a
// whole image gives torch's values: the scale in/out, the source position
// scale * (i + 0.5) - 0.5, the four coefficients of its fraction, and sums
// taken in tap order, columns inside rows.

constexpr float kCubicA = -0.75f;

// Keys' kernel for |x| <= 1 and for 1 < |x| < 2.
float CubicNear(float x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
float CubicFar(float x) {
  return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA;
}

struct CubicTap {
  int index[4];  // source pixels, clamped to the image
  float weight[4];
};

std::vector<CubicTap> CubicTaps(double start, double length, int out, int limit) {
  std::vector<CubicTap> taps(static_cast<size_t>(out));
  const float scale = static_cast<float>(length) / static_cast<float>(out);
  for (int i = 0; i < out; ++i) {
    const float pos =
        scale * (static_cast<float>(i) + 0.5f) - 0.5f + static_cast<float>(start);
    const int base = std::min(static_cast<int>(std::floor(pos)), limit - 1);
    const float t = std::clamp(pos - static_cast<float>(base), 0.0f, 1.0f);
    CubicTap& tap = taps[static_cast<size_t>(i)];
    tap.weight[0] = CubicFar(t + 1.0f);
    tap.weight[1] = CubicNear(t);
    const float opposite = 1.0f - t;
    tap.weight[2] = CubicNear(opposite);
    tap.weight[3] = CubicFar(opposite + 1.0f);
    for (int k = 0; k < 4; ++k) tap.index[k] = std::clamp(base - 1 + k, 0, limit - 1);
  }
  return taps;
}

// ((p0 * w0 + p1 * w1) + p2 * w2) + p3 * w3, as torch sums the taps.
template <typename T>
float CubicSum(const T* p, size_t stride, const int* index, const float* weight) {
  float sum = static_cast<float>(p[index[0] * stride]) * weight[0];
  for (int k = 1; k < 4; ++k) sum += static_cast<float>(p[index[k] * stride]) * weight[k];
  return sum;
}

void ResizeBicubic(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                   int out_width, int out_height, bool flip, uint8_t* out) {
  const std::vector<CubicTap> xs = CubicTaps(box.x, box.width, out_width, src_width);
  const std::vector<CubicTap> ys = CubicTaps(box.y, box.height, out_height, src_height);
  // Separable: every source row the vertical taps read is resampled along x
  // once (HWC floats), then each output pixel sums four of those rows.
  const int first_row = ys.front().index[0];
  const int rows = ys.back().index[3] - first_row + 1;
  const size_t row_values = static_cast<size_t>(out_width) * 3;
  std::vector<float> resampled(static_cast<size_t>(rows) * row_values);
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = src + static_cast<size_t>(first_row + r) * src_width * 3;
    float* dst = resampled.data() + static_cast<size_t>(r) * row_values;
    for (int ox = 0; ox < out_width; ++ox) {
      const CubicTap& tap = xs[static_cast<size_t>(flip ? out_width - 1 - ox : ox)];
      for (int c = 0; c < 3; ++c) {
        dst[ox * 3 + c] = CubicSum(row + c, 3, tap.index, tap.weight);
      }
    }
  }
  const size_t plane = static_cast<size_t>(out_width) * out_height;
  for (int oy = 0; oy < out_height; ++oy) {
    const CubicTap& tap = ys[static_cast<size_t>(oy)];
    int index[4];
    for (int k = 0; k < 4; ++k) index[k] = tap.index[k] - first_row;
    for (int ox = 0; ox < out_width; ++ox) {
      for (int c = 0; c < 3; ++c) {
        const float v =
            CubicSum(resampled.data() + ox * 3 + c, row_values, index, tap.weight);
        // Rounded half to even (torch.round), within the byte's range.
        out[c * plane + static_cast<size_t>(oy) * out_width + ox] =
            static_cast<uint8_t>(std::nearbyint(std::clamp(v, 0.0f, 255.0f)));
      }
    }
  }
}

}  // namespace

absl::StatusOr<Interpolation> ParseInterpolation(absl::string_view name) {
  if (name == "bilinear") return Interpolation::kBilinear;
  if (name == "bicubic") return Interpolation::kBicubic;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown interpolation \"", name, "\"; expected bilinear or bicubic"));
}

int ResizeMargin(Interpolation interpolation) {
  return interpolation == Interpolation::kBicubic ? 2 : 1;
}

void ResizeBoxToChw(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                    int out_width, int out_height, bool flip, uint8_t* out,
                    Interpolation interpolation) {
  if (interpolation == Interpolation::kBicubic) {
    ResizeBicubic(src, src_width, src_height, box, out_width, out_height, flip, out);
  } else {
    ResizeBilinear(src, src_width, src_height, box, out_width, out_height, flip, out);
  }
}

}  // namespace tessera::trainer::data
