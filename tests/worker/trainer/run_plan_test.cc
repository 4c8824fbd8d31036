// What a rank's run will do (run/run_plan.h): the plan on the CPU, the span of
// steps it trains and the set-up line that describes it.
#include "worker/trainer/run/run_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

DataShape Shape(int64_t train_size) {
  DataShape shape;
  shape.channels = 1;
  shape.num_classes = 10;
  shape.train_size = train_size;
  shape.test_size = 200;
  return shape;
}

TrainerOptions TwoMicroBatchesOfTen() {
  TrainerOptions options;
  options.device = "cpu";
  options.batch_size = 10;
  options.grad_accum = 2;
  return options;
}

TEST(RunPlanTest, PlansTheRanksShareOnTheCpu) {
  const absl::StatusOr<RunPlan> plan =
      PlanRun(TwoMicroBatchesOfTen(), Shape(1000), /*rank=*/1, /*world=*/2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->placement.cuda);
  EXPECT_EQ(plan->device, c10::Device(c10::kCPU));
  EXPECT_EQ(plan->config.in_channels, 1);
  EXPECT_EQ(plan->config.num_classes, 10);
  EXPECT_EQ(plan->train_sampler.num_samples(), 500);
  EXPECT_EQ(plan->test_sampler.num_samples(), 100);
  // 1000 samples, 2 ranks x 2 micro-batches x 10 a step.
  EXPECT_EQ(plan->epochs.steps_per_epoch(), 25);
  EXPECT_TRUE(plan->synchronize);
  EXPECT_FALSE(plan->fp16);
  EXPECT_FALSE(plan->autocast);
}

TEST(RunPlanTest, AWorldOfOneOrAllReduceOffDoesNotSynchronise) {
  TrainerOptions options = TwoMicroBatchesOfTen();
  EXPECT_FALSE(PlanRun(options, Shape(1000), 0, 1, 0)->synchronize);
  options.allreduce = false;
  EXPECT_FALSE(PlanRun(options, Shape(1000), 0, 2, 0)->synchronize);
}

TEST(RunPlanTest, WeakScalingTrainsEachRankOnASubset) {
  TrainerOptions options = TwoMicroBatchesOfTen();
  options.scaling = "weak";
  options.weak_fraction = 0.1;
  const absl::StatusOr<RunPlan> plan = PlanRun(options, Shape(1000), 0, 2, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->train_sampler.num_samples(), 100);  // 10% of the set per rank
}

TEST(RunPlanTest, RefusesAShareSmallerThanOneStep) {
  const absl::Status refused =
      PlanRun(TwoMicroBatchesOfTen(), Shape(30), 0, 2, 0).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(),
              HasSubstr("fewer than one step's 2 micro-batches of 10"));
}

TEST(RunPlanTest, TheSpanEndsWithTheLastEpochOrMaxSteps) {
  TrainerOptions options = TwoMicroBatchesOfTen();
  options.epochs = 2;
  const RunPlan plan = *PlanRun(options, Shape(1000), 0, 2, 0);
  absl::StatusOr<RunSpan> span = SpanOf(options, plan.epochs, 0, DataPosition{}, 0.1);
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->total_steps, 50);
  EXPECT_EQ(span->warmup_steps, 5);
  // Resumed after 30 steps, at sample 200 of epoch 1: 20 steps left.
  span = SpanOf(options, plan.epochs, 30, DataPosition{1, 200}, 0.1);
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->total_steps, 50);
  EXPECT_EQ(span->warmup_steps, 5);  // still a share of the whole run
  options.max_steps = 40;
  options.warmup_steps = 3;
  span = SpanOf(options, plan.epochs, 30, DataPosition{1, 200}, 0.1);
  EXPECT_EQ(span->total_steps, 40);
  EXPECT_EQ(span->warmup_steps, 3);
  EXPECT_EQ(SpanOf(options, plan.epochs, 45, DataPosition{1, 300}, 0.1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RunPlanTest, TheSetUpLineSaysWhatTheRunDoes) {
  TrainerOptions options = TwoMicroBatchesOfTen();
  options.dataset = "synthetic";
  const RunPlan plan = *PlanRun(options, Shape(1000), 0, 2, 0);
  RunFacts facts{.parameter_count = 1234567,
                 .world_size = 2,
                 .backend = "gloo",
                 .total_steps = 25,
                 .buckets = 3};
  std::string line = DescribeRun(options, plan, Shape(1000), facts);
  EXPECT_THAT(line,
              HasSubstr("vit-micro (1.2M parameters, 28 px, patch 4) on synthetic: "
                        "1000 train / 200 test images; world 2 (gloo), device cpu, "
                        "fp32, 500 samples per rank, 25 steps per epoch of 2 x 10, "
                        "25 steps, adamw, gradient all-reduce 3 buckets, overlapped"));
  EXPECT_THAT(line, HasSubstr(", CPU kernels "));
  EXPECT_THAT(line, ::testing::Not(HasSubstr("resumed")));
  facts.resumed_from = 8;
  facts.resumed_world_size = 4;
  facts.position = DataPosition{1, 40};
  line = DescribeRun(options, plan, Shape(1000), facts);
  EXPECT_THAT(line, HasSubstr(", resumed at step 8 (written by 4 ranks; epoch 1, "
                              "sample 40), CPU kernels "));
}

}  // namespace
}  // namespace tessera::trainer
