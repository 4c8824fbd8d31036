#include "worker/trainer/model/loss_scaler.h"

#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

TEST(LossScalerTest, StartsAtTheInitialScale) {
  EXPECT_EQ(LossScaler().scale(), 65536.0);
  LossScalerOptions options;
  options.initial_scale = 128;
  EXPECT_EQ(LossScaler(options).scale(), 128.0);
}

TEST(LossScalerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  LossScaler scaler;
  EXPECT_FALSE(scaler.Update(/*found_non_finite=*/true));
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 32768.0);
}

TEST(LossScalerTest, DoublesAfterGrowthIntervalGoodStepsInARow) {
  LossScalerOptions options;
  options.initial_scale = 8;
  options.growth_interval = 3;
  LossScaler scaler(options);
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 8.0);
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 16.0);
  // An overflow resets the run of good steps.
  scaler.Update(false);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 8.0);
  scaler.Update(false);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 8.0);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 16.0);
}

TEST(LossScalerTest, NeverDropsBelowTheMinimum) {
  LossScalerOptions options;
  options.initial_scale = 4;
  options.min_scale = 1;
  LossScaler scaler(options);
  for (int i = 0; i < 10; ++i) scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1.0);
}

TEST(LossScalerTest, RestoreContinuesFromASavedState) {
  LossScalerOptions options;
  options.growth_interval = 2;
  LossScaler first(options);
  first.Update(true);
  first.Update(false);
  LossScaler second(options);
  second.Restore(first.state());
  EXPECT_EQ(second.scale(), first.scale());
  // One more good step completes the interval begun before the save.
  second.Update(false);
  EXPECT_EQ(second.scale(), 2 * first.scale());
}

}  // namespace
}  // namespace tessera::trainer
