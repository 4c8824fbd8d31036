// gemm_floor: the matrix-product floor of one ViT training step on this CPU.
//
// Times, on oneDNN's sgemm (the same calls tessera-train's CPU Linear layers
// make), every matrix product one fp32 training step of a ViT preset needs at
// a batch size: the patch embedding, each block's qkv, proj, fc1 and fc2
// layers forward (x W^T) and backward (dx = dy W, dW = dy^T x), the attention
// products per head (Q K^T and P V forward; dV, dP, dQ, dK backward, without
// the recomputation flash attention adds) and the head. Each product's best
// time over the repeats counts, except the attention products: they are tiny
// ([tokens, head_dim]) and run batched by real kernels, so they are charged at
// the best rate any of the other products reached, which can only lower the
// sum. The sum is a floor on the step time of an fp32 trainer running these
// products on oneDNN on these threads, so batch / sum is a ceiling on its
// images/s. Nothing else a step does (norms, GELU, softmax, the optimizer,
// copies, the framework) is counted.
//
// Usage: gemm_floor --model vit-cifar-tiny --batch-size 32 [--threads 1]
//                   [--repeats 20]
// Prints one line:
//   gemm_floor model=vit-cifar-tiny batch=32 threads=1 gflop_per_image=0.752
//   gemm_ms=160.1 gflops=150.3 ceiling_images_per_s=199.9
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/model/vit_config.h"

namespace {

// One product C[m, n] = op(A) op(B), row-major, repeated `count` times a step.
struct Product {
  const char* what;
  char trans_a, trans_b;
  int64_t m, n, k;
  int64_t count;
  bool batched = false;  // charged at the best measured rate (see the top)
};

double Flops(const Product& p) { return 2.0 * p.m * p.n * p.k * p.count; }

// The products of one training step (forward and backward) at `batch`.
std::vector<Product> StepProducts(const tessera::trainer::ViTConfig& c, int64_t batch) {
  const int64_t patches = c.num_patches();
  const int64_t tokens = patches + 1;
  const int64_t rows = batch * tokens;
  const int64_t dim = c.dim;
  const int64_t head_dim = dim / c.heads;
  const int64_t patch_in =
      static_cast<int64_t>(c.in_channels) * c.patch_size * c.patch_size;
  const int64_t per_head = batch * c.heads * c.depth;
  std::vector<Product> out = {
      // Patch embedding as a product over the patches; no input gradient.
      {"patch fwd", 'N', 'T', batch * patches, dim, patch_in, 1},
      {"patch dW", 'T', 'N', dim, patch_in, batch * patches, 1},
      // Classification head on the class token.
      {"head fwd", 'N', 'T', batch, c.num_classes, dim, 1},
      {"head dx", 'N', 'N', batch, dim, c.num_classes, 1},
      {"head dW", 'T', 'N', c.num_classes, dim, batch, 1},
      // Attention per (image, head, block): [tokens, head_dim] operands.
      {"QK^T", 'N', 'T', tokens, tokens, head_dim, per_head, true},
      {"PV", 'N', 'N', tokens, head_dim, tokens, per_head, true},
      {"dV = P^T dO", 'T', 'N', tokens, head_dim, tokens, per_head, true},
      {"dP = dO V^T", 'N', 'T', tokens, tokens, head_dim, per_head, true},
      {"dQ = dS K", 'N', 'N', tokens, head_dim, tokens, per_head, true},
      {"dK = dS^T Q", 'T', 'N', tokens, head_dim, tokens, per_head, true},
  };
  const struct {
    const char* name;
    int64_t in, out;
  } linears[] = {{"qkv", dim, 3 * dim},
                 {"proj", dim, dim},
                 {"fc1", dim, c.mlp_dim},
                 {"fc2", c.mlp_dim, dim}};
  for (const auto& l : linears) {
    out.push_back({l.name, 'N', 'T', rows, l.out, l.in, c.depth});  // y = x W^T
    out.push_back({l.name, 'N', 'N', rows, l.in, l.out, c.depth});  // dx = dy W
    out.push_back({l.name, 'T', 'N', l.out, l.in, rows, c.depth});  // dW = dy^T x
  }
  return out;
}

// Best time in seconds of one call of `p` over `repeats` tries.
double BestSeconds(const Product& p, int repeats) {
  const int64_t a_rows = p.trans_a == 'N' ? p.m : p.k;
  const int64_t a_cols = p.trans_a == 'N' ? p.k : p.m;
  const int64_t b_rows = p.trans_b == 'N' ? p.k : p.n;
  const int64_t b_cols = p.trans_b == 'N' ? p.n : p.k;
  std::vector<float> a(a_rows * a_cols), b(b_rows * b_cols), c(p.m * p.n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.01f;
  double best = 1e30;
  for (int r = 0; r < repeats + 2; ++r) {  // two warm-up calls
    const auto start = std::chrono::steady_clock::now();
    if (dnnl_sgemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a.data(), a_cols, b.data(),
                   b_cols, 0.0f, c.data(), p.n) != dnnl_success) {
      std::fprintf(stderr, "gemm_floor: oneDNN sgemm failed for %s\n", p.what);
      std::exit(1);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r >= 2) best = std::min(best, s);
  }
  return best;
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "gemm_floor: %s\n"
               "usage: gemm_floor --model PRESET --batch-size N [--threads T] "
               "[--repeats R]\n"
               "example: gemm_floor --model vit-cifar-tiny --batch-size 32 --threads 1\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int64_t batch = 0;
  int threads = 1;
  int repeats = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      return Usage("prints the fp32 matrix-product floor");
    if (i + 1 >= argc) return Usage(("missing value for " + arg).c_str());
    const char* value = argv[++i];
    if (arg == "--model") {
      model = value;
    } else if (arg == "--batch-size") {
      batch = std::atoll(value);
    } else if (arg == "--threads") {
      threads = std::atoi(value);
    } else if (arg == "--repeats") {
      repeats = std::atoi(value);
    } else {
      return Usage(("unknown flag " + arg).c_str());
    }
  }
  if (model.empty()) return Usage("--model is required");
  if (batch <= 0 || threads <= 0 || repeats <= 0) {
    return Usage("--batch-size, --threads and --repeats must be positive");
  }
  absl::StatusOr<tessera::trainer::ViTConfig> config =
      tessera::trainer::FindViTPreset(model);
  if (!config.ok()) return Usage(std::string(config.status().message()).c_str());
  omp_set_num_threads(threads);

  double seconds = 0, flops = 0, batched_flops = 0, best_rate = 0;
  for (const Product& p : StepProducts(*config, batch)) {
    flops += Flops(p);
    if (p.batched) {
      batched_flops += Flops(p);
      continue;
    }
    const double s = BestSeconds(p, repeats);
    seconds += s * static_cast<double>(p.count);
    best_rate = std::max(best_rate, 2.0 * p.m * p.n * p.k / s);
  }
  seconds += batched_flops / best_rate;
  std::printf(
      "gemm_floor model=%s batch=%lld threads=%d gflop_per_image=%.3f gemm_ms=%.1f "
      "gflops=%.1f ceiling_images_per_s=%.1f\n",
      model.c_str(), static_cast<long long>(batch), threads, flops / batch / 1e9,
      seconds * 1e3, flops / seconds / 1e9, batch / seconds);
  return 0;
}
