// LayerNorm over the last dimension and exact GELU as autograd functions on
// tessera's CPU kernels (cpu_kernels.h): one vectorised pass per row or element
// forward and backward, instead of LibTorch 1.13's slower CPU kernels. Same
// arithmetic as torch::layer_norm / torch::gelu to float rounding.
//
// Inputs that the kernels do not cover (not float32, not on the CPU, or under
// CPU autocast) take the stock LibTorch op, so callers may use these
// unconditionally. Intra-op parallelism follows at::get_num_threads().
#ifndef TESSERA_WORKER_TRAINER_MODEL_FUSED_LAYERS_H_
#define TESSERA_WORKER_TRAINER_MODEL_FUSED_LAYERS_H_

#include <torch/types.h>

namespace tessera::trainer {

// True when LayerNorm/Gelu below would run tessera's kernels on `x`.
bool CpuKernelsApply(const torch::Tensor& x);

// y = (x - mean) / sqrt(var + eps) * weight + bias over x's last dimension,
// whose size weight and bias ([dim]) must have.
torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps);

// Whether this build has oneDNN for Linear (TESSERA_HAVE_DNNL); without it
// Linear below is torch::nn::functional::linear.
bool CpuLinearAvailable();

// x weight^T + bias over x's last dimension (torch::nn::Linear's forward), with
// the matrix products on oneDNN's sgemm, which at a ViT's shapes (thousands of
// token rows by 64 to 3072 features) runs about 10% faster than the OpenBLAS
// Debian's LibTorch uses. Without a bias it is torch::nn::functional::linear.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias);

// 0.5 x (1 + erf(x / sqrt(2))), elementwise.
torch::Tensor Gelu(const torch::Tensor& x);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_FUSED_LAYERS_H_
