// Whether a run captures its step in a CUDA graph (run/capture_plan.h), on the
// CPU, where it never can: "off" and "auto" run eager, "on" fails.
#include "worker/trainer/run/capture_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/status/status.h"

namespace tessera::trainer {
namespace {

using ::testing::IsEmpty;
using ::testing::Not;

torch::optim::SGD AnOptimizer() {
  return torch::optim::SGD({torch::zeros({2}, torch::requires_grad())},
                           torch::optim::SGDOptions(0.1));
}

TEST(CapturePlanTest, OffRunsEagerWithoutReasons) {
  TrainerOptions options;
  options.cuda_graph = "off";
  torch::optim::SGD optimizer = AnOptimizer();
  const absl::StatusOr<CapturePlan> plan =
      PlanCapture(options, DevicePlacement{}, 1, false, optimizer);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->capture);
  EXPECT_EQ(plan->adamw, nullptr);
  EXPECT_EQ(plan->stream, nullptr);
  EXPECT_THAT(plan->reasons, IsEmpty());
}

TEST(CapturePlanTest, AutoOnTheCpuRunsEagerAndSaysWhy) {
  TrainerOptions options;
  options.cuda_graph = "auto";
  torch::optim::SGD optimizer = AnOptimizer();
  const absl::StatusOr<CapturePlan> plan =
      PlanCapture(options, DevicePlacement{}, 2, true, optimizer);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->capture);
  EXPECT_EQ(plan->stream, nullptr);
  EXPECT_THAT(plan->reasons, Not(IsEmpty()));
}

TEST(CapturePlanTest, OnFailsWhereCaptureIsRuledOutAndAnUnknownModeIsRefused) {
  TrainerOptions options;
  torch::optim::SGD optimizer = AnOptimizer();
  options.cuda_graph = "on";
  EXPECT_EQ(PlanCapture(options, DevicePlacement{}, 1, false, optimizer).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.cuda_graph = "sometimes";
  EXPECT_EQ(PlanCapture(options, DevicePlacement{}, 1, false, optimizer).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
