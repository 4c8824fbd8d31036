// A captured run's steps (gpu/capture_schedule.h) through a fake of the
// capture, on CPU: a resumed process captures at its own third step, and each
// replay reads the true AdamW step count from the device tensor that
// FusedAdamW::WriteStepCounts fills before the step.
#include "worker/trainer/gpu/capture_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/trainer/model/fused_adamw.h"
#include "worker/trainer/model/optimizer_state.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;
using Action = CaptureSchedule::Action;

// Records what the schedule calls, in order.
class RecordingSteps : public CaptureSchedule::Steps {
 public:
  void WriteStepValues() override { calls.push_back("write"); }
  absl::Status RunEager() override {
    calls.push_back("eager");
    return absl::OkStatus();
  }
  absl::Status Capture() override {
    calls.push_back("capture");
    return capture_status;
  }
  void AdvanceHostCopies() override { calls.push_back("advance"); }
  absl::Status Replay() override {
    calls.push_back("replay");
    return absl::OkStatus();
  }

  std::vector<std::string> calls;
  absl::Status capture_status = absl::OkStatus();
};

TEST(CaptureScheduleTest, TwoEagerStepsOfThisProcessThenOneCaptureThenReplays) {
  CaptureSchedule schedule;
  RecordingSteps steps;
  std::vector<Action> actions;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Action> action = schedule.Step(steps);
    ASSERT_TRUE(action.ok()) << action.status();
    actions.push_back(*action);
  }
  EXPECT_THAT(actions, ElementsAre(Action::kEager, Action::kEager, Action::kCapture,
                                   Action::kReplay, Action::kReplay));
  // The values are written before every step; the capturing step's host side
  // advanced the counts itself, so only later replays advance them.
  EXPECT_THAT(steps.calls, ElementsAre("write", "eager", "write", "eager", "write",
                                       "capture", "replay", "write", "advance", "replay",
                                       "write", "advance", "replay"));
  EXPECT_EQ(schedule.process_steps(), 5);
}

TEST(CaptureScheduleTest, AFailedCaptureIsReturnedAndNotCounted) {
  CaptureSchedule schedule;
  RecordingSteps steps;
  ASSERT_TRUE(schedule.Step(steps).ok());
  ASSERT_TRUE(schedule.Step(steps).ok());
  steps.capture_status = absl::FailedPreconditionError("capture refused");
  EXPECT_EQ(schedule.Step(steps).status().message(), "capture refused");
  EXPECT_EQ(schedule.process_steps(), 2);
}

// FusedAdamW with its counts in a (CPU) tensor, as a captured run keeps them
// on its device; the fake capture runs the host side once, and each fake
// replay reads the count the graph would read.
class OptimizerSteps : public CaptureSchedule::Steps {
 public:
  OptimizerSteps(FusedAdamW& adamw, std::vector<torch::Tensor>& params)
      : adamw_(adamw), params_(params) {}
  void WriteStepValues() override { adamw_.WriteStepCounts(); }
  absl::Status RunEager() override {
    Gradients();
    adamw_.step();
    return absl::OkStatus();
  }
  absl::Status Capture() override { return RunEager(); }
  void AdvanceHostCopies() override { adamw_.AdvanceHostSteps(); }
  absl::Status Replay() override {
    for (const torch::Tensor& p : params_) {
      replayed_counts.push_back(adamw_.device_step_count(p).item<float>());
    }
    return absl::OkStatus();
  }

  std::vector<float> replayed_counts;

 private:
  void Gradients() {
    for (torch::Tensor& p : params_) p.mutable_grad() = torch::ones_like(p);
  }
  FusedAdamW& adamw_;
  std::vector<torch::Tensor>& params_;
};

TEST(CaptureScheduleTest, EveryReplayOfAResumedRunReadsTheTrueStepCount) {
  std::vector<torch::Tensor> params = {torch::zeros({3, 2}).requires_grad_(),
                                       torch::zeros({4}).requires_grad_()};
  FusedAdamW adamw(params, torch::optim::AdamWOptions(1e-3));
  // Resumed at step 100: the state a checkpoint restores.
  for (const torch::Tensor& p : params) {
    FlatParamState state;
    state.step = 100;
    state.tensors = {{"exp_avg", torch::zeros({p.numel()})},
                     {"exp_avg_sq", torch::zeros({p.numel()})}};
    WriteFlatState(adamw, p, state);
  }
  adamw.UseDeviceStepCounts();
  CaptureSchedule schedule;
  OptimizerSteps steps(adamw, params);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(schedule.Step(steps).ok());
  // Steps 101 and 102 eager, 103 captured and replayed, 104-106 replayed.
  EXPECT_THAT(steps.replayed_counts, ElementsAre(103, 103, 104, 104, 105, 105, 106, 106));
  for (const torch::Tensor& p : params) {
    std::optional<FlatParamState> state = ReadFlatState(adamw, p);
    ASSERT_TRUE(state.has_value());
    EXPECT_EQ(state->step, 106);  // what a checkpoint of the run saves
  }
}

TEST(CaptureScheduleTest, AFreshRunsCountsStartAtOne) {
  std::vector<torch::Tensor> params = {torch::zeros({5}).requires_grad_()};
  FusedAdamW adamw(params, torch::optim::AdamWOptions(1e-3));
  adamw.UseDeviceStepCounts();
  EXPECT_EQ(adamw.device_step_count(params[0]).item<float>(), 1);
  CaptureSchedule schedule;
  OptimizerSteps steps(adamw, params);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(schedule.Step(steps).ok());
  EXPECT_THAT(steps.replayed_counts, ElementsAre(3, 4));
}

}  // namespace
}  // namespace tessera::trainer
