#include "worker/trainer/model/fused_layers.h"

#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {
namespace {

// Largest |a - b| relative to max(1, |b|), over all elements.
double MaxError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.detach().to(torch::kFloat64);
  const torch::Tensor b64 = b.detach().to(torch::kFloat64);
  return ((a64 - b64).abs() / b64.abs().clamp_min(1.0)).max().item<double>();
}

// Names of every autograd node reachable from `root`'s grad_fn.
std::set<std::string> GraphNodeNames(const torch::Tensor& root) {
  std::set<std::string> names;
  std::vector<torch::autograd::Node*> stack = {root.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    names.insert(node->name());
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      stack.push_back(edge.function.get());
    }
  }
  return names;
}

bool AnyNameContains(const std::set<std::string>& names, const std::string& part) {
  for (const std::string& name : names) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

struct LayerNormResult {
  torch::Tensor y, dx, dweight, dbias;
};

template <typename Fn>
LayerNormResult RunLayerNorm(const torch::Tensor& x0, const torch::Tensor& w0,
                             const torch::Tensor& b0, const torch::Tensor& dy, Fn fn) {
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor w = w0.clone().requires_grad_(true);
  torch::Tensor b = b0.clone().requires_grad_(true);
  torch::Tensor y = fn(x, w, b);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

void ExpectLayerNormMatchesLibTorch(const std::vector<int64_t>& shape, double offset) {
  torch::manual_seed(11);
  const int64_t dim = shape.back();
  // An offset mean checks the variance for cancellation.
  const torch::Tensor x = torch::randn(shape) * 2.0 + offset;
  const torch::Tensor w = torch::randn({dim});
  const torch::Tensor b = torch::randn({dim});
  const torch::Tensor dy = torch::randn(shape);
  const LayerNormResult ours = RunLayerNorm(
      x, w, b, dy, [](auto& x, auto& w, auto& b) { return LayerNorm(x, w, b, 1e-6); });
  const LayerNormResult stock = RunLayerNorm(x, w, b, dy, [&](auto& x, auto& w, auto& b) {
    return torch::layer_norm(x, {dim}, w, b, 1e-6);
  });
  EXPECT_LT(MaxError(ours.y, stock.y), 1e-5) << "dim " << dim;
  EXPECT_LT(MaxError(ours.dx, stock.dx), 1e-4) << "dim " << dim;
  // Sums over all rows: compare relative to the gradient's scale.
  const double scale = stock.dweight.abs().max().item<double>();
  EXPECT_LT(MaxError(ours.dweight / scale, stock.dweight / scale), 1e-5) << "dim " << dim;
  EXPECT_LT(MaxError(ours.dbias / scale, stock.dbias / scale), 1e-5) << "dim " << dim;
}

struct LinearResult {
  torch::Tensor y, dx, dweight, dbias;
};

LinearResult RunLinear(const torch::Tensor& x0, const torch::Tensor& w0,
                       const torch::Tensor& b0, bool ours) {
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor w = w0.clone().requires_grad_(true);
  torch::Tensor b = b0.defined() ? b0.clone().requires_grad_(true) : torch::Tensor();
  // A strided view of x, as the ViT's head gets (the class token of each row).
  torch::Tensor input = x.dim() == 3 ? x.select(1, 0) : x;
  torch::Tensor y =
      ours ? Linear(input, w, b) : torch::nn::functional::linear(input, w, b);
  torch::manual_seed(99);
  y.backward(torch::randn(y.sizes()));
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

TEST(FusedLayersTest, LayerNormForwardAndBackwardMatchLibTorch) {
  torch::set_num_threads(1);
  ExpectLayerNormMatchesLibTorch({4, 50, 64}, 0.0);   // vit-micro's rows
  ExpectLayerNormMatchesLibTorch({3, 17, 77}, 0.0);   // a width no vector divides
  ExpectLayerNormMatchesLibTorch({2, 5, 768}, 30.0);  // ViT-B's width, offset mean
}

// Rows of one value have zero variance: the output is the bias and the weight
// gets no gradient, exactly (ATen's kernel rounds x * rstd * w - mean * rstd * w
// here, which with rstd = 1 / sqrt(eps) leaves errors near 1e-4).
TEST(FusedLayersTest, LayerNormOfConstantRowsIsTheBias) {
  torch::Tensor x = (torch::randn({5, 1}) * 3.0).requires_grad_(true);
  torch::Tensor w = torch::randn({1}, torch::requires_grad());
  torch::Tensor b = torch::randn({1}, torch::requires_grad());
  torch::Tensor y = LayerNorm(x, w, b, 1e-6);
  EXPECT_TRUE(torch::equal(y, b.detach().expand({5, 1})));
  y.sum().backward();
  EXPECT_EQ(w.grad().item<float>(), 0.0f);
  EXPECT_EQ(b.grad().item<float>(), 5.0f);
  EXPECT_TRUE(torch::equal(x.grad(), torch::zeros({5, 1})));
}

TEST(FusedLayersTest, LayerNormSplitAcrossThreadsSumsEveryRangesWeightGradient) {
  const int previous = torch::get_num_threads();
  torch::set_num_threads(2);
  // 6400 rows of 64: several ranges of rows, each with its own partial sums.
  ExpectLayerNormMatchesLibTorch({128, 50, 64}, 1.0);
  torch::set_num_threads(previous);
}

// GELU split over threads, and the Linear products on oneDNN's own threads.
TEST(FusedLayersTest, GeluAndLinearSplitAcrossThreadsMatchLibTorch) {
  const int previous = torch::get_num_threads();
  torch::set_num_threads(2);
  torch::manual_seed(17);
  const torch::Tensor h = torch::randn({64, 50, 128});
  EXPECT_LT(MaxError(Gelu(h), torch::gelu(h)), 2e-6);
  if (CpuLinearAvailable()) {
    const torch::Tensor x = torch::randn({3200, 64});  // vit-micro's token rows
    const torch::Tensor w = torch::randn({192, 64}) * 0.1;
    const torch::Tensor b = torch::randn({192});
    const LinearResult ours = RunLinear(x, w, b, true);
    const LinearResult stock = RunLinear(x, w, b, false);
    const double scale = stock.dweight.abs().max().item<double>();
    EXPECT_LT(MaxError(ours.y, stock.y), 1e-5);
    EXPECT_LT(MaxError(ours.dx, stock.dx), 1e-5);
    EXPECT_LT(MaxError(ours.dweight / scale, stock.dweight / scale), 1e-5);
  }
  torch::set_num_threads(previous);
}

TEST(FusedLayersTest, GeluForwardAndBackwardMatchLibTorch) {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  // Wide range, both tails, exact zeros, and a length no vector divides.
  torch::Tensor x0 = torch::cat(
      {torch::randn({10001}) * 4.0, torch::linspace(-12, 12, 997), torch::zeros({3})});
  const torch::Tensor dy = torch::randn(x0.sizes());
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor y = Gelu(x);
  y.backward(dy);
  torch::Tensor x_ref = x0.clone().requires_grad_(true);
  torch::Tensor y_ref = torch::gelu(x_ref);
  y_ref.backward(dy);
  EXPECT_LT(MaxError(y, y_ref), 2e-6);
  EXPECT_LT(MaxError(x.grad(), x_ref.grad()), 2e-6);
}

TEST(FusedLayersTest, LinearForwardAndBackwardMatchLibTorch) {
  if (!CpuLinearAvailable()) GTEST_SKIP() << "built without oneDNN";
  torch::set_num_threads(1);
  torch::manual_seed(13);
  struct Case {
    std::vector<int64_t> x;
    int64_t out;
    bool bias;
  };
  for (const Case& c :
       std::vector<Case>{{{4, 50, 64}, 192, true},  // qkv of vit-micro
                         {{3200, 128}, 64, true},   // rows as fc2 sees them
                         {{5, 7, 33}, 10, false},   // strided rows, no bias
                         {{0, 64}, 16, true}}) {    // no rows
    const torch::Tensor x = torch::randn(c.x);
    const torch::Tensor w = torch::randn({c.out, c.x.back()}) * 0.1;
    const torch::Tensor b = c.bias ? torch::randn({c.out}) : torch::Tensor();
    const LinearResult ours = RunLinear(x, w, b, true);
    const LinearResult stock = RunLinear(x, w, b, false);
    ASSERT_EQ(ours.y.sizes(), stock.y.sizes());
    if (ours.y.numel() == 0) {
      EXPECT_TRUE(torch::equal(ours.dweight, torch::zeros_like(w)));
      continue;
    }
    const double scale = stock.dweight.abs().max().item<double>();
    EXPECT_LT(MaxError(ours.y, stock.y), 1e-5) << c.x.back();
    EXPECT_LT(MaxError(ours.dx, stock.dx), 1e-5) << c.x.back();
    EXPECT_LT(MaxError(ours.dweight / scale, stock.dweight / scale), 1e-5) << c.x.back();
    if (c.bias) EXPECT_LT(MaxError(ours.dbias / scale, stock.dbias / scale), 1e-5);
  }
}

TEST(FusedLayersTest, FloatCpuTensorsRunTesseraKernelsAndOtherTypesTheStockOps) {
  torch::Tensor x = torch::randn({8, 16}).requires_grad_(true);
  torch::Tensor w = torch::ones({16}, torch::requires_grad());
  torch::Tensor b = torch::zeros({16}, torch::requires_grad());
  EXPECT_TRUE(CpuKernelsApply(x));
  EXPECT_TRUE(AnyNameContains(GraphNodeNames(Gelu(x)), "GeluFunction"));
  EXPECT_TRUE(
      AnyNameContains(GraphNodeNames(LayerNorm(x, w, b, 1e-6)), "LayerNormFunction"));
  const torch::Tensor weight = torch::randn({4, 16}, torch::requires_grad());
  const torch::Tensor bias = torch::randn({4}, torch::requires_grad());
  EXPECT_EQ(AnyNameContains(GraphNodeNames(Linear(x, weight, bias)), "LinearFunction"),
            CpuLinearAvailable());
  // Without a bias, the stock op.
  EXPECT_FALSE(AnyNameContains(GraphNodeNames(Linear(x, weight, {})), "LinearFunction"));

  torch::Tensor xd = torch::randn({8, 16}, torch::kFloat64).requires_grad_(true);
  EXPECT_FALSE(CpuKernelsApply(xd));
  EXPECT_EQ(GraphNodeNames(Gelu(xd)).count("GeluBackward0"), 1U);
  EXPECT_TRUE(torch::equal(Gelu(xd), torch::gelu(xd)));
  const torch::Tensor wd = w.to(torch::kFloat64);
  const torch::Tensor bd = b.to(torch::kFloat64);
  EXPECT_TRUE(torch::equal(LayerNorm(xd, wd, bd, 1e-6),
                           torch::layer_norm(xd, {16}, wd, bd, 1e-6)));
}

// The same ViT (same seed) with and without tessera's kernels: the kernels are
// in the graph, and logits and every parameter's gradient agree.
TEST(FusedLayersTest, ViTWithTesseraKernelsMatchesTheStockOps) {
  torch::set_num_threads(1);
  ViTConfig config = *ResolveViTConfig("vit-micro", 1, 10);
  torch::manual_seed(21);
  const torch::Tensor images = torch::randn({6, 1, 28, 28});
  const torch::Tensor labels = torch::randint(0, 10, {6});

  struct Run {
    torch::Tensor logits;
    std::vector<torch::Tensor> grads;
    std::set<std::string> nodes;
  };
  auto run = [&](bool cpu_kernels) {
    config.cpu_kernels = cpu_kernels;
    torch::manual_seed(7);
    VisionTransformer model(config);
    // A non-zero head so that gradients reach every block.
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().rfind("head.", 0) == 0) p.value().normal_(0.0, 0.1);
    }
    Run out;
    {
      torch::AutoGradMode grad_mode(true);
      out.logits = model->forward(images);
      out.nodes = GraphNodeNames(out.logits);
      torch::nn::functional::cross_entropy(out.logits, labels).backward();
    }
    for (const torch::Tensor& p : model->parameters())
      out.grads.push_back(p.grad().clone());
    return out;
  };
  const Run ours = run(true);
  const Run stock = run(false);
  EXPECT_TRUE(AnyNameContains(ours.nodes, "LayerNormFunction"));
  EXPECT_TRUE(AnyNameContains(ours.nodes, "GeluFunction"));
  EXPECT_EQ(AnyNameContains(ours.nodes, "LinearFunction"), CpuLinearAvailable());
  EXPECT_FALSE(AnyNameContains(ours.nodes, "NativeLayerNormBackward"));
  EXPECT_TRUE(AnyNameContains(stock.nodes, "NativeLayerNormBackward"));
  EXPECT_FALSE(AnyNameContains(stock.nodes, "GeluFunction"));
  EXPECT_FALSE(AnyNameContains(stock.nodes, "LinearFunction"));

  EXPECT_LT(MaxError(ours.logits, stock.logits), 1e-5);
  ASSERT_EQ(ours.grads.size(), stock.grads.size());
  for (size_t i = 0; i < ours.grads.size(); ++i) {
    const double scale = std::max(stock.grads[i].abs().max().item<double>(), 1e-12);
    EXPECT_LT(MaxError(ours.grads[i] / scale, stock.grads[i] / scale), 1e-4)
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace tessera::trainer
