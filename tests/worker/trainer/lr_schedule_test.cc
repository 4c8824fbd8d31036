// The learning-rate schedule (run/lr_schedule.h): linear warm-up, cosine
// decay to the floor, and each optimizer group's rate.
#include "worker/trainer/run/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tessera::trainer {
namespace {

TEST(LrScheduleTest, WarmsUpLinearlyToThePeak) {
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 0, 104, 4, 0.1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 1, 104, 4, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 2, 104, 4, 0.1), 1.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 3, 104, 4, 0.1), 2.0);
}

TEST(LrScheduleTest, DecaysAlongACosineToTheFloorAndStaysThere) {
  // Decay over steps 4..104, to 2.0 x 0.1.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 4, 104, 4, 0.1), 2.0);
  EXPECT_NEAR(ScheduledLearningRate(2.0, 29, 104, 4, 0.1),
              0.2 + 1.8 * 0.5 * (1.0 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(2.0, 54, 104, 4, 0.1), 1.1, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(2.0, 104, 104, 4, 0.1), 0.2, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(2.0, 150, 104, 4, 0.1), 0.2, 1e-12);
  // A zero floor decays to zero.
  EXPECT_NEAR(ScheduledLearningRate(2.0, 104, 104, 4, 0.0), 0.0, 1e-12);
}

TEST(LrScheduleTest, WithoutWarmUpTheFirstStepTakesThePeak) {
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.5, 0, 10, 0, 0.0), 0.5);
  // A run no longer than its warm-up still decays over one step.
  EXPECT_NEAR(ScheduledLearningRate(0.5, 6, 5, 5, 0.0), 0.0, 1e-12);
}

TEST(LrScheduleTest, TheWarmUpIsTheStepsAskedForOrAShareOfTheRun) {
  EXPECT_EQ(ResolveWarmupSteps(-1, 200, 0.05), 10);
  EXPECT_EQ(ResolveWarmupSteps(-1, 101, 0.05), 6);  // rounded up
  EXPECT_EQ(ResolveWarmupSteps(-1, 0, 0.05), 0);
  EXPECT_EQ(ResolveWarmupSteps(7, 200, 0.05), 7);
  EXPECT_EQ(ResolveWarmupSteps(0, 200, 0.05), 0);
}

TEST(LrScheduleTest, GroupsTakeTheirScaleAndOnlyTheHeadTrainsDuringAHeadWarmUp) {
  const std::vector<double> scales = {0.25, 0.5, 1.0};
  const std::vector<bool> heads = {false, false, true};
  EXPECT_EQ(GroupLearningRates(0.1, 0, 3, scales, heads),
            (std::vector<double>{0.0, 0.0, 0.1}));
  EXPECT_EQ(GroupLearningRates(0.1, 2, 3, scales, heads),
            (std::vector<double>{0.0, 0.0, 0.1}));
  EXPECT_EQ(GroupLearningRates(0.1, 3, 3, scales, heads),
            (std::vector<double>{0.1 * 0.25, 0.1 * 0.5, 0.1}));
  // No head warm-up: every group at its scale from the start.
  EXPECT_EQ(GroupLearningRates(0.2, 0, 0, {1.0, 1.0}, {true, true}),
            (std::vector<double>{0.2, 0.2}));
}

}  // namespace
}  // namespace tessera::trainer
