#include "worker/trainer/model/vit.h"

#include <torch/torch.h>

#include <string>

#include "gtest/gtest.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {
namespace {

int64_t CountParameters(torch::nn::Module& module) {
  int64_t total = 0;
  for (const torch::Tensor& p : module.parameters()) total += p.numel();
  return total;
}

ViTConfig Micro() { return *ResolveViTConfig("vit-micro", 1, 10); }

TEST(VisionTransformerTest, MapsImagesToOneLogitPerClass) {
  VisionTransformer model(Micro());
  const torch::Tensor logits = model->forward(torch::randn({3, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(VisionTransformerTest, TakesChannelsAndClassesFromTheConfig) {
  VisionTransformer model(*ResolveViTConfig("vit-micro", 3, 7));
  const torch::Tensor logits = model->forward(torch::randn({2, 3, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 7}));
}

TEST(VisionTransformerTest, ParameterCountMatchesTheFormula) {
  VisionTransformer micro(Micro());
  EXPECT_EQ(CountParameters(*micro), ViTParameterCount(Micro()));
  const ViTConfig ti16 = *FindViTPreset("vit-ti16");
  VisionTransformer tiny(ti16);
  EXPECT_EQ(CountParameters(*tiny), 5'717'416);
}

TEST(VisionTransformerTest, ViTB16MatchesTorchvisionParameterCount) {
  VisionTransformer model(*FindViTPreset("vit-b16"));
  EXPECT_EQ(CountParameters(*model), 86'567'656);
}

TEST(VisionTransformerTest, SameSeedGivesSameInitialParameters) {
  torch::manual_seed(5);
  VisionTransformer a(Micro());
  torch::manual_seed(5);
  VisionTransformer b(Micro());
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
}

TEST(VisionTransformerTest, BackwardReachesEveryParameter) {
  VisionTransformer model(Micro());
  const torch::Tensor images = torch::randn({4, 1, 28, 28});
  const torch::Tensor labels = torch::tensor({0, 1, 2, 3}, torch::kLong);
  // Two steps: the zero-initialised head passes no gradient back on the first.
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int i = 0; i < 2; ++i) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
    optimizer.step();
  }
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
  }
}

TEST(VisionTransformerTest, LogitsDependOnTheLastPatchThroughAttention) {
  torch::manual_seed(1);
  VisionTransformer model(Micro());
  // Give the head weights so logits depend on the class token.
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (item.key().rfind("head.", 0) == 0) item.value().normal_(0, 1);
    }
  }
  model->eval();
  torch::Tensor images = torch::zeros({1, 1, 28, 28});
  const torch::Tensor before = model->forward(images);
  images.index_put_({0, 0, 27, 27}, 5.0);  // only the last patch changes
  const torch::Tensor after = model->forward(images);
  EXPECT_FALSE(torch::allclose(before, after));
}

}  // namespace
}  // namespace tessera::trainer
