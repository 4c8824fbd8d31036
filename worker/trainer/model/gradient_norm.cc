#include "worker/trainer/model/gradient_norm.h"

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace tessera::trainer {

void ClipGradientNorm(const std::vector<at::Tensor>& buffers, double max_norm) {
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor squares =
      torch::zeros({}, buffers.front().options().dtype(torch::kDouble));
  for (const torch::Tensor& buffer : buffers) {
    squares.add_(buffer.square().sum(torch::kDouble));
  }
  const torch::Tensor factor = (max_norm / (squares.sqrt() + 1e-6))
                                   .clamp_max(1.0)
                                   .to(buffers.front().scalar_type());
  for (const torch::Tensor& buffer : buffers) buffer.mul_(factor);
}

bool AnyNonFinite(const std::vector<at::Tensor>& buffers) {
  if (buffers.empty()) return false;
  torch::NoGradGuard no_grad;
  torch::Tensor total = torch::zeros({}, buffers.front().options());
  for (const torch::Tensor& buffer : buffers) total.add_(buffer.sum());
  return !std::isfinite(total.item<double>());
}

}  // namespace tessera::trainer
