#include "worker/trainer/model/fused_layers.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/normalization.h>
#include <torch/version.h>

#include <algorithm>
#include <vector>

#include "worker/trainer/model/cpu_kernels.h"

#ifndef TESSERA_HAVE_DNNL
#define TESSERA_HAVE_DNNL 0
#endif
#if TESSERA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace tessera::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// About 32K elements per task, as ATen's GRAIN_SIZE.
constexpr int64_t kGrainElements = 32768;

bool CpuAutocastEnabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}

bool IsCpuFloat(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 &&
         t.layout() == torch::kStrided;
}

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps) {
    const torch::Tensor x = input.contiguous();
    const torch::Tensor w = weight.contiguous();
    const torch::Tensor b = bias.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({rows}, x.options());
    torch::Tensor rstd = torch::empty({rows}, x.options());
    const float* x_data = x.data_ptr<float>();
    const float* w_data = w.data_ptr<float>();
    const float* b_data = b.data_ptr<float>();
    float* y_data = y.data_ptr<float>();
    float* mean_data = mean.data_ptr<float>();
    float* rstd_data = rstd.data_ptr<float>();
    const int64_t grain =
        std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      cpu::LayerNormForward(x_data, w_data, b_data, cols, static_cast<float>(eps), begin,
                            end, y_data, mean_data, rstd_data);
    });
    ctx->save_for_backward({x, w, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor& mean = saved[2];
    const torch::Tensor& rstd = saved[3];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    torch::Tensor dx = torch::empty_like(x);

    // Each range adds its weight/bias gradient into its own slice of
    // `partial` ([ranges, 2, cols]); the slices are summed at the end.
    const int64_t grain =
        std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1));
    const int64_t ranges =
        std::clamp<int64_t>((rows + grain - 1) / grain, 1, at::get_num_threads());
    torch::Tensor partial = torch::zeros({ranges, 2, cols}, x.options());
    const float* dy_data = dy.data_ptr<float>();
    const float* x_data = x.data_ptr<float>();
    const float* mean_data = mean.data_ptr<float>();
    const float* rstd_data = rstd.data_ptr<float>();
    const float* w_data = w.data_ptr<float>();
    float* dx_data = dx.data_ptr<float>();
    float* partial_data = partial.data_ptr<float>();
    at::parallel_for(0, ranges, 1, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        float* dweight = partial_data + r * 2 * cols;
        cpu::LayerNormBackward(dy_data, x_data, mean_data, rstd_data, w_data, cols,
                               rows * r / ranges, rows * (r + 1) / ranges, dx_data,
                               dweight, dweight + cols);
      }
    });
    torch::Tensor sums = ranges == 1 ? partial[0] : partial.sum(0);
    return {dx, sums[0], sums[1], torch::Tensor()};
  }
};

class GeluFunction : public torch::autograd::Function<GeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    const torch::Tensor x = input.contiguous();
    torch::Tensor y = torch::empty_like(x);
    const float* x_data = x.data_ptr<float>();
    float* y_data = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      cpu::GeluForward(x_data, begin, end, y_data);
    });
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    torch::Tensor dx = torch::empty_like(x);
    const float* dy_data = dy.data_ptr<float>();
    const float* x_data = x.data_ptr<float>();
    float* dx_data = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      cpu::GeluBackward(dy_data, x_data, begin, end, dx_data);
    });
    return {dx};
  }
};

#if TESSERA_HAVE_DNNL
// Row-major C[m, n] = op(A) op(B) (+ C when accumulate) on oneDNN's sgemm.
void Gemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, bool accumulate, float* c,
          int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb,
                                          accumulate ? 1.0f : 0.0f, c, ldc);
  TORCH_CHECK(status == dnnl_success, "oneDNN sgemm failed with status ",
              static_cast<int>(status), " (", m, "x", n, "x", k, ")");
}

// y = x weight^T + bias over x's last dimension, as torch::nn::Linear; x is
// viewed as [rows, in]. Backward: dx = dy weight, dweight = dy^T x, dbias = the
// column sums of dy.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const int64_t in = weight.size(1);
    const int64_t out = weight.size(0);
    const torch::Tensor x = input.reshape({-1, in}).contiguous();
    const torch::Tensor w = weight.contiguous();
    const int64_t rows = x.size(0);
    torch::Tensor y = torch::empty({rows, out}, x.options());
    y.copy_(bias.reshape({1, out}).expand({rows, out}));
    if (rows > 0) {
      Gemm('N', 'T', rows, out, in, x.data_ptr<float>(), in, w.data_ptr<float>(), in,
           /*accumulate=*/true, y.data_ptr<float>(), out);
    }
    ctx->save_for_backward({x, w});
    std::vector<int64_t> shape = input.sizes().vec();
    shape.back() = out;
    return y.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const int64_t rows = x.size(0);
    const int64_t in = w.size(1);
    const int64_t out = w.size(0);
    const torch::Tensor dy = grad_outputs[0].reshape({rows, out}).contiguous();
    torch::Tensor dx = torch::empty({rows, in}, x.options());
    torch::Tensor dweight = torch::empty({out, in}, x.options());
    if (rows > 0) {
      Gemm('N', 'N', rows, in, out, dy.data_ptr<float>(), out, w.data_ptr<float>(), in,
           false, dx.data_ptr<float>(), in);
      Gemm('T', 'N', out, in, rows, dy.data_ptr<float>(), out, x.data_ptr<float>(), in,
           false, dweight.data_ptr<float>(), in);
    } else {
      dx.zero_();
      dweight.zero_();
    }
    std::vector<int64_t> input_shape = grad_outputs[0].sizes().vec();
    input_shape.back() = in;
    return {dx.view(input_shape), dweight, dy.sum(0)};
  }
};
#endif

}  // namespace

bool CpuKernelsApply(const torch::Tensor& x) {
  return IsCpuFloat(x) && !CpuAutocastEnabled();
}

torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps) {
  if (!CpuKernelsApply(x) || !IsCpuFloat(weight) || !IsCpuFloat(bias) || x.dim() == 0) {
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  }
  TORCH_CHECK(weight.numel() == x.size(-1) && bias.numel() == x.size(-1),
              "LayerNorm: weight and bias need ", x.size(-1), " entries");
  return LayerNormFunction::apply(x, weight, bias, eps);
}

bool CpuLinearAvailable() { return TESSERA_HAVE_DNNL != 0; }

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
#if TESSERA_HAVE_DNNL
  // Autograd functions take no undefined inputs: bias-free layers (none in the
  // ViT) take the stock op.
  if (CpuKernelsApply(x) && IsCpuFloat(weight) && IsCpuFloat(bias) && x.dim() >= 1 &&
      weight.dim() == 2 && x.size(-1) == weight.size(1)) {
    return LinearFunction::apply(x, weight, bias);
  }
#endif
  return torch::nn::functional::linear(x, weight, bias);
}

torch::Tensor Gelu(const torch::Tensor& x) {
  if (!CpuKernelsApply(x)) return torch::gelu(x);
  return GeluFunction::apply(x);
}

}  // namespace tessera::trainer
