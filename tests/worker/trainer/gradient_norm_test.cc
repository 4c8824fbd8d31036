// The step's gradients as one vector (model/gradient_norm.h): clipping to a
// global norm, and the fp16 overflow check.
#include "worker/trainer/model/gradient_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

namespace tessera::trainer {
namespace {

TEST(GradientNormTest, ClipsTheGlobalNormAcrossBuffersToTheMaximum) {
  // Norm 5 over both buffers together.
  std::vector<torch::Tensor> buffers = {torch::tensor({3.0f, 0.0f}),
                                        torch::tensor({4.0f})};
  ClipGradientNorm(buffers, 1.0);
  EXPECT_NEAR(buffers[0][0].item<float>(), 0.6f, 1e-6);
  EXPECT_NEAR(buffers[1][0].item<float>(), 0.8f, 1e-6);
  const double norm = std::sqrt(buffers[0].square().sum().item<double>() +
                                buffers[1].square().sum().item<double>());
  EXPECT_NEAR(norm, 1.0, 1e-6);
}

TEST(GradientNormTest, LeavesGradientsUnderTheMaximumAlone) {
  std::vector<torch::Tensor> buffers = {torch::tensor({3.0f, 0.0f}),
                                        torch::tensor({4.0f})};
  ClipGradientNorm(buffers, 10.0);
  EXPECT_EQ(buffers[0][0].item<float>(), 3.0f);
  EXPECT_EQ(buffers[1][0].item<float>(), 4.0f);
  ClipGradientNorm({}, 1.0);  // nothing to clip
}

TEST(GradientNormTest, TellsInfiniteAndNanGradients) {
  EXPECT_FALSE(AnyNonFinite({}));
  EXPECT_FALSE(AnyNonFinite({torch::ones({3}), torch::full({2}, -5.0f)}));
  EXPECT_TRUE(AnyNonFinite(
      {torch::ones({3}), torch::full({2}, std::numeric_limits<float>::infinity())}));
  EXPECT_TRUE(AnyNonFinite({torch::full({1}, std::numeric_limits<float>::quiet_NaN())}));
}

}  // namespace
}  // namespace tessera::trainer
