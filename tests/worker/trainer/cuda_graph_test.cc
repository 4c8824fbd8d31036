// The decision to capture the training step in a CUDA graph (cuda_graph.h):
// every reason that rules it out is named, "on" fails on any, "off" never
// captures.
#include "worker/trainer/gpu/cuda_graph.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

CaptureConditions OneGpuAdamWBf16() {
  CaptureConditions c;
  c.cuda_device = true;
  c.build_can_capture = true;
  c.precision = "bf16";
  return c;
}

TEST(CudaGraphTest, AutoCapturesAOneGpuAdamWStepWithNoReasonAgainst) {
  absl::StatusOr<CaptureDecision> decision = DecideCapture("auto", OneGpuAdamWBf16());
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_TRUE(decision->capture);
  EXPECT_THAT(decision->reasons, IsEmpty());
}

TEST(CudaGraphTest, AutoNamesEveryReasonThatRulesCaptureOut) {
  CaptureConditions c = OneGpuAdamWBf16();
  c.world_size = 4;
  c.grad_accum = 2;
  c.precision = "fp16";
  c.optimizer = "sgd";
  c.optimizer_capturable = false;
  c.fault_hook = true;
  absl::StatusOr<CaptureDecision> decision = DecideCapture("auto", c);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_FALSE(decision->capture);
  EXPECT_THAT(
      decision->reasons,
      ElementsAre(HasSubstr("world size 4"), HasSubstr("gradient accumulation (2"),
                  HasSubstr("fp16: the loss scaler"), HasSubstr("optimizer sgd"),
                  HasSubstr("--fault")));
}

TEST(CudaGraphTest, ACpuRankOrABuildWithoutGraphsRunsEagerSayingWhy) {
  CaptureConditions cpu;
  absl::StatusOr<CaptureDecision> on_cpu = DecideCapture("auto", cpu);
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_FALSE(on_cpu->capture);
  EXPECT_THAT(on_cpu->reasons, ElementsAre(HasSubstr("not train on a CUDA device")));

  CaptureConditions old_build = OneGpuAdamWBf16();
  old_build.build_can_capture = false;
  absl::StatusOr<CaptureDecision> old = DecideCapture("auto", old_build);
  ASSERT_TRUE(old.ok());
  EXPECT_THAT(old->reasons, ElementsAre(HasSubstr("LibTorch 2.4 or newer")));
}

TEST(CudaGraphTest, OnFailsNamingTheReasonsAndOffNeverCaptures) {
  CaptureConditions c = OneGpuAdamWBf16();
  c.world_size = 2;
  absl::StatusOr<CaptureDecision> on = DecideCapture("on", c);
  ASSERT_FALSE(on.ok());
  EXPECT_EQ(on.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(on.status().message(), HasSubstr("world size 2"));

  absl::StatusOr<CaptureDecision> on_ok = DecideCapture("on", OneGpuAdamWBf16());
  ASSERT_TRUE(on_ok.ok());
  EXPECT_TRUE(on_ok->capture);

  absl::StatusOr<CaptureDecision> off = DecideCapture("off", OneGpuAdamWBf16());
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->capture);
  EXPECT_THAT(off->reasons, IsEmpty());

  EXPECT_EQ(DecideCapture("sometimes", c).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
