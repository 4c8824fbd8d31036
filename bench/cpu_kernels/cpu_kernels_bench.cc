// tessera's CPU LayerNorm, GELU and Linear (worker/trainer/model/fused_layers.h)
// against LibTorch's, through the same public calls the ViT makes, at the shapes
// of vit-micro (batch 64) and vit-cifar-tiny (batch 32). Prints, per op and
// shape, the best-of-7 time of forward alone and of forward + backward, for
// both, and the speedup. Single intra-op thread unless --threads N.
//
//   build/bench/cpu_kernels_bench [--threads N]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "worker/trainer/model/fused_layers.h"

namespace {

using Clock = std::chrono::steady_clock;
using Op = std::function<torch::Tensor(const torch::Tensor&)>;

// Best of 7 rounds of 5 calls, microseconds per call, after 3 warmup calls.
double BestMicros(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  double best = 1e300;
  for (int round = 0; round < 7; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < 5; ++i) fn();
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 5);
  }
  return best;
}

void Compare(const std::string& name, const torch::Tensor& input, const Op& ours,
             const Op& stock) {
  const torch::Tensor grad_out = torch::randn_like(stock(input).detach());
  auto forward = [&](const Op& op) {
    return BestMicros([&] {
      torch::NoGradGuard no_grad;
      op(input);
    });
  };
  auto forward_backward = [&](const Op& op) {
    torch::Tensor x = input.detach().clone().requires_grad_(true);
    return BestMicros([&] {
      x.mutable_grad() = torch::Tensor();
      op(x).backward(grad_out);
    });
  };
  const double f_ours = forward(ours), f_stock = forward(stock);
  const double fb_ours = forward_backward(ours), fb_stock = forward_backward(stock);
  std::printf("%-42s %10.1f %10.1f %7.2fx %12.1f %12.1f %7.2fx\n", name.c_str(), f_ours,
              f_stock, f_stock / f_ours, fb_ours, fb_stock, fb_stock / fb_ours);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  std::printf("tessera CPU kernels vs LibTorch %s, %d intra-op thread(s); Linear on %s\n",
              TORCH_VERSION, threads,
              tessera::trainer::CpuLinearAvailable() ? "oneDNN" : "LibTorch (no oneDNN)");
  std::printf("%-42s %10s %10s %8s %12s %12s %8s\n", "op [shape]", "fwd us", "torch us",
              "speedup", "fwd+bwd us", "torch us", "speedup");

  struct Shape {
    const char* model;
    int64_t batch, tokens, dim, mlp;
  };
  for (const Shape& s :
       {Shape{"vit-micro", 64, 50, 64, 128}, Shape{"vit-cifar-tiny", 32, 65, 192, 384}}) {
    const std::string tag =
        std::string(" [") + s.model + " " + std::to_string(s.batch * s.tokens) + "x";
    const torch::Tensor x = torch::randn({s.batch, s.tokens, s.dim});
    const torch::Tensor w = torch::randn({s.dim}, torch::requires_grad());
    const torch::Tensor b = torch::randn({s.dim}, torch::requires_grad());
    Compare(
        "LayerNorm" + tag + std::to_string(s.dim) + "]", x,
        [&](const torch::Tensor& in) {
          return tessera::trainer::LayerNorm(in, w, b, 1e-6);
        },
        [&](const torch::Tensor& in) {
          return torch::layer_norm(in, {s.dim}, w, b, 1e-6);
        });

    const torch::Tensor h = torch::randn({s.batch, s.tokens, s.mlp});
    Compare(
        "GELU" + tag + std::to_string(s.mlp) + "]", h,
        [](const torch::Tensor& in) { return tessera::trainer::Gelu(in); },
        [](const torch::Tensor& in) { return torch::gelu(in); });

    for (const auto& [label, out] : std::vector<std::pair<std::string, int64_t>>{
             {"qkv", 3 * s.dim}, {"fc1", s.mlp}}) {
      const torch::Tensor weight =
          (torch::randn({out, s.dim}) * 0.05).requires_grad_(true);
      const torch::Tensor bias = torch::zeros({out}, torch::requires_grad());
      Compare(
          "Linear " + label + tag + std::to_string(s.dim) + "->" + std::to_string(out) +
              "]",
          x,
          [&](const torch::Tensor& in) {
            return tessera::trainer::Linear(in, weight, bias);
          },
          [&](const torch::Tensor& in) {
            return torch::nn::functional::linear(in, weight, bias);
          });
    }
    const torch::Tensor fc2_weight =
        (torch::randn({s.dim, s.mlp}) * 0.05).requires_grad_(true);
    const torch::Tensor fc2_bias = torch::zeros({s.dim}, torch::requires_grad());
    Compare(
        "Linear fc2" + tag + std::to_string(s.mlp) + "->" + std::to_string(s.dim) + "]",
        h,
        [&](const torch::Tensor& in) {
          return tessera::trainer::Linear(in, fc2_weight, fc2_bias);
        },
        [&](const torch::Tensor& in) {
          return torch::nn::functional::linear(in, fc2_weight, fc2_bias);
        });
  }
  return 0;
}
