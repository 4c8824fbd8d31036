// Float32 CPU kernels for the ViT's LayerNorm and exact (erf) GELU, forward and
// backward, on plain arrays. LibTorch 1.13's CPU kernels for these spend 1 to 2
// ns per element at a ViT's shapes (rows of 64 to 768 values); these make one
// vectorised pass per row or element. fused_layers.h wraps them as autograd
// functions.
//
// The arithmetic matches ATen's: LayerNorm uses the biased variance and
// 1 / sqrt(var + eps); GELU is 0.5 x (1 + erf(x / sqrt(2))) with erf from
// Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), the same
// approximation ATen's vectorised erf uses. Results agree with ATen's to float
// rounding, not bit for bit.
//
// Each function covers a range of rows or elements so that callers can split
// work across threads; none allocates or keeps state, so distinct ranges may
// run concurrently. On x86-64 each is compiled for AVX-512, AVX2 and the
// baseline, and the loader picks the best the CPU has.
#ifndef TESSERA_WORKER_TRAINER_MODEL_CPU_KERNELS_H_
#define TESSERA_WORKER_TRAINER_MODEL_CPU_KERNELS_H_

#include <cstdint>

namespace tessera::trainer::cpu {

// Rows [begin, end) of x [rows, cols]: y = (x - mean) * rstd * weight + bias,
// with the row's mean and rstd = 1 / sqrt(biased variance + eps) stored for the
// backward pass. weight and bias have cols entries.
void LayerNormForward(const float* x, const float* weight, const float* bias,
                      int64_t cols, float eps, int64_t begin, int64_t end, float* y,
                      float* mean, float* rstd);

// Rows [begin, end): dx from dy, x and the forward's mean and rstd. Adds this
// range's share of the weight and bias gradients to dweight and dbias (cols
// entries each, which the caller zeroes; one pair per concurrent range).
void LayerNormBackward(const float* dy, const float* x, const float* mean,
                       const float* rstd, const float* weight, int64_t cols,
                       int64_t begin, int64_t end, float* dx, float* dweight,
                       float* dbias);

// Elements [begin, end): y = gelu(x).
void GeluForward(const float* x, int64_t begin, int64_t end, float* y);

// Elements [begin, end): dx = dy * gelu'(x).
void GeluBackward(const float* dy, const float* x, int64_t begin, int64_t end, float* dx);

}  // namespace tessera::trainer::cpu

#endif  // TESSERA_WORKER_TRAINER_MODEL_CPU_KERNELS_H_
