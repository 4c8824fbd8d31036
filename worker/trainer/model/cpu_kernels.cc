#include "worker/trainer/model/cpu_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>

// One clone per instruction set on x86-64 (GCC and Clang pick at load time);
// elsewhere the plain build. The loops are written for the auto-vectoriser:
// no aliasing (__restrict), reductions under `omp simd` (-fopenmp-simd).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_CPU_CLONES
#endif

namespace tessera::trainer::cpu {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1 / sqrt(2)
constexpr float kInvSqrtTwoPi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

// e^x for x in float range, as Cephes' expf: x = k ln 2 + r with |r| <= ln 2 / 2,
// a degree-6 polynomial for e^r, and 2^k put into the exponent bits. Relative
// error about 1e-7; arguments are clamped to [-87, 88], so no denormals or
// infinities (GELU only asks for e^(-x^2/2) <= 1).
[[gnu::always_inline]] inline float Exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float k = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - k * 0.693359375f - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t exponent = (static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

// erf(u) = sign(u) (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-u^2)),
// t = 1 / (1 + p |u|) (Abramowitz and Stegun 7.1.26). `gauss` is e^(-u^2),
// which the GELU backward pass reuses.
[[gnu::always_inline]] inline float Erf(float u, float gauss) {
  const float t = 1.0f / (1.0f + 0.3275911f * std::fabs(u));
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float magnitude = 1.0f - poly * t * gauss;
  return std::copysign(magnitude, u);
}

}  // namespace

TESSERA_CPU_CLONES
void LayerNormForward(const float* __restrict x, const float* __restrict weight,
                      const float* __restrict bias, int64_t cols, float eps,
                      int64_t begin, int64_t end, float* __restrict y,
                      float* __restrict mean, float* __restrict rstd) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t row = begin; row < end; ++row) {
    const float* __restrict in = x + row * cols;
    float* __restrict out = y + row * cols;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j) sum += in[j];
    const float row_mean = sum * inv_cols;
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (int64_t j = 0; j < cols; ++j) {
      const float d = in[j] - row_mean;
      squares += d * d;
    }
    const float row_rstd = 1.0f / std::sqrt(squares * inv_cols + eps);
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      out[j] = (in[j] - row_mean) * row_rstd * weight[j] + bias[j];
    }
    mean[row] = row_mean;
    rstd[row] = row_rstd;
  }
}

TESSERA_CPU_CLONES
void LayerNormBackward(const float* __restrict dy, const float* __restrict x,
                       const float* __restrict mean, const float* __restrict rstd,
                       const float* __restrict weight, int64_t cols, int64_t begin,
                       int64_t end, float* __restrict dx, float* __restrict dweight,
                       float* __restrict dbias) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t row = begin; row < end; ++row) {
    const float* __restrict in = x + row * cols;
    const float* __restrict grad = dy + row * cols;
    float* __restrict out = dx + row * cols;
    const float row_mean = mean[row];
    const float row_rstd = rstd[row];
    // d/dxhat = dy * weight; dx = rstd (g - mean(g) - xhat mean(g xhat)).
    float g_sum = 0.0f;
    float g_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, g_xhat_sum)
    for (int64_t j = 0; j < cols; ++j) {
      const float xhat = (in[j] - row_mean) * row_rstd;
      const float g = grad[j] * weight[j];
      g_sum += g;
      g_xhat_sum += g * xhat;
      dweight[j] += grad[j] * xhat;
      dbias[j] += grad[j];
    }
    const float g_mean = g_sum * inv_cols;
    const float g_xhat_mean = g_xhat_sum * inv_cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const float xhat = (in[j] - row_mean) * row_rstd;
      out[j] = row_rstd * (grad[j] * weight[j] - g_mean - xhat * g_xhat_mean);
    }
  }
}

TESSERA_CPU_CLONES
void GeluForward(const float* __restrict x, int64_t begin, int64_t end,
                 float* __restrict y) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float u = x[i] * kSqrtHalf;
    y[i] = 0.5f * x[i] * (1.0f + Erf(u, Exp(-u * u)));
  }
}

TESSERA_CPU_CLONES
void GeluBackward(const float* __restrict dy, const float* __restrict x, int64_t begin,
                  int64_t end, float* __restrict dx) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float u = x[i] * kSqrtHalf;
    const float gauss = Exp(-u * u);  // e^(-x^2 / 2)
    const float cdf = 0.5f * (1.0f + Erf(u, gauss));
    dx[i] = dy[i] * (cdf + x[i] * kInvSqrtTwoPi * gauss);
  }
}

}  // namespace tessera::trainer::cpu
