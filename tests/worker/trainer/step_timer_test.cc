#include "worker/trainer/gpu/step_timer.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

class StepTimerTest : public ::testing::Test {
 protected:
  void Advance(int ms) { now_ += absl::Milliseconds(ms); }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<StepTimer> timer_ = MakeHostStepTimer([this] { return now_; });
};

TEST_F(StepTimerTest, AttributesTheTimeBetweenMarksToTheMarkedPhase) {
  timer_->BeginStep();
  Advance(2);
  timer_->Mark(StepPhase::kData);
  Advance(10);
  timer_->Mark(StepPhase::kForward);
  Advance(20);
  timer_->Mark(StepPhase::kBackward);
  Advance(3);
  timer_->Mark(StepPhase::kComm);
  Advance(4);
  timer_->Mark(StepPhase::kOptimizer);
  Advance(1);
  timer_->EndStep();
  const StepTimes times = timer_->TakeTotals();
  EXPECT_EQ(times.steps, 1);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kData), 0.002);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kForward), 0.010);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kBackward), 0.020);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kComm), 0.003);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kOptimizer), 0.004);
  // The step total includes time after the last mark.
  EXPECT_DOUBLE_EQ(times.step_seconds, 0.040);
}

TEST_F(StepTimerTest, HostTimerMeasuresHostTime) { EXPECT_FALSE(timer_->on_device()); }

TEST_F(StepTimerTest, SumsRepeatedPhasesAndStepsUntilTaken) {
  for (int step = 0; step < 2; ++step) {
    timer_->BeginStep();
    for (int micro = 0; micro < 2; ++micro) {
      Advance(1);
      timer_->Mark(StepPhase::kData);
      Advance(5);
      timer_->Mark(StepPhase::kForward);
    }
    timer_->EndStep();
  }
  StepTimes times = timer_->TakeTotals();
  EXPECT_EQ(times.steps, 2);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kData), 0.004);
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kForward), 0.020);
  EXPECT_DOUBLE_EQ(times.step_seconds, 0.024);
  // Taken: the next interval starts from zero.
  times = timer_->TakeTotals();
  EXPECT_EQ(times.steps, 0);
  EXPECT_DOUBLE_EQ(times.step_seconds, 0.0);
}

TEST_F(StepTimerTest, TimeBetweenStepsIsNotCounted) {
  timer_->BeginStep();
  Advance(5);
  timer_->Mark(StepPhase::kData);
  timer_->EndStep();
  Advance(100);  // evaluation, checkpointing, reporting
  timer_->BeginStep();
  Advance(5);
  timer_->Mark(StepPhase::kData);
  timer_->EndStep();
  const StepTimes times = timer_->TakeTotals();
  EXPECT_DOUBLE_EQ(times.seconds(StepPhase::kData), 0.010);
  EXPECT_DOUBLE_EQ(times.step_seconds, 0.010);
}

}  // namespace
}  // namespace tessera::trainer
