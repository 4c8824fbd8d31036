// Where a resumed run goes on (run/resume_point.h): the checkpoint's global
// data position at any world size, and the checkpoints a run refuses.
#include "worker/trainer/run/resume_point.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

// 100 samples an epoch, 2 ranks x 5 per micro-batch, 2 micro-batches a step:
// 20 samples a step.
EpochPlan TwoRanks() {
  return *EpochPlan::Create(
      EpochPlanOptions{.epoch_size = 100, .world_size = 2, .batch_size = 5, .accum = 2});
}

RankCheckpoint WrittenBy(int world, int64_t step, int64_t epoch, int64_t sample) {
  RankCheckpoint state;
  state.world_size = world;
  state.position.step = step;
  state.position.epoch = epoch;
  state.position.sample_in_epoch = sample;
  state.class_names = {"cat", "dog"};
  return state;
}

TrainerOptions BatchOfFive() {
  TrainerOptions options;
  options.batch_size = 5;
  options.grad_accum = 2;
  return options;
}

TEST(ResumePointTest, GoesOnWhereTheCheckpointStopped) {
  const absl::StatusOr<ResumePoint> at = ResumePointOf(
      WrittenBy(2, 12, 1, 40), TwoRanks(), BatchOfFive(), 2, {"cat", "dog"});
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->step, 12);
  EXPECT_EQ(at->position, (DataPosition{1, 40}));
  EXPECT_EQ(at->writer_world, 2);
}

TEST(ResumePointTest, AnOldCheckpointsPositionComesFromItsBatchCount) {
  RankCheckpoint state = WrittenBy(4, 12, 1, -1);
  state.position.batch_in_epoch = 2;  // of 4 ranks x 5: sample 40
  const absl::StatusOr<ResumePoint> at =
      ResumePointOf(state, TwoRanks(), BatchOfFive(), 2, {"cat", "dog"});
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->position, (DataPosition{1, 40}));
  EXPECT_EQ(at->writer_world, 4);
}

TEST(ResumePointTest, APositionWithoutAWholeStepLeftMovesToTheNextEpoch) {
  const absl::StatusOr<ResumePoint> at = ResumePointOf(
      WrittenBy(3, 12, 1, 90), TwoRanks(), BatchOfFive(), 2, {"cat", "dog"});
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->position, (DataPosition{2, 0}));
}

TEST(ResumePointTest, RefusesAnotherWorldUnderWeakScalingAndOtherClasses) {
  TrainerOptions weak = BatchOfFive();
  weak.scaling = "weak";
  EXPECT_TRUE(
      ResumePointOf(WrittenBy(2, 12, 1, 40), TwoRanks(), weak, 2, {"cat", "dog"}).ok());
  const absl::Status resized =
      ResumePointOf(WrittenBy(4, 12, 1, 40), TwoRanks(), weak, 2, {"cat", "dog"})
          .status();
  EXPECT_EQ(resized.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resized.message(), HasSubstr("weak scaling"));
  const absl::Status relabelled =
      ResumePointOf(WrittenBy(2, 12, 1, 40), TwoRanks(), BatchOfFive(), 2, {"cat", "cow"})
          .status();
  EXPECT_EQ(relabelled.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(relabelled.message(), HasSubstr("class 1 is 'dog'"));
}

TEST(ResumePointTest, AnotherWorldRebuildsTheGeneratorsFromTheSeedAndStep) {
  const RankCheckpoint state = WrittenBy(4, 12, 1, 40);
  const ResumePoint at{.step = 12, .position = {1, 40}, .writer_world = 4};
  ASSERT_TRUE(RestoreGenerators(state, at, 7, 1, 2, -1).ok());
  const torch::Tensor first = torch::rand({4});
  ASSERT_TRUE(RestoreGenerators(state, at, 7, 1, 2, -1).ok());
  EXPECT_TRUE(torch::equal(torch::rand({4}), first));
  ASSERT_TRUE(RestoreGenerators(state, at, 7, 0, 2, -1).ok());  // another rank
  EXPECT_FALSE(torch::equal(torch::rand({4}), first));
}

TEST(ResumePointTest, TheWritersWorldRestoresTheCheckpointsGenerators) {
  RankCheckpoint state = WrittenBy(2, 12, 1, 40);
  torch::manual_seed(3);
  CaptureRngState(-1, state);
  const torch::Tensor expected = torch::rand({4});
  torch::manual_seed(99);
  ASSERT_TRUE(
      RestoreGenerators(state, ResumePoint{.step = 12, .writer_world = 2}, 7, 0, 2, -1)
          .ok());
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

TEST(ResumePointTest, ResumesFromTheLatestCheckpointOrStartsFresh) {
  const std::string root = ::testing::TempDir() + "/resume_point_test_latest";
  std::filesystem::remove_all(root);
  const CheckpointDirectory dir(root);
  TrainerOptions options = BatchOfFive();
  options.device = "cpu";
  DataShape shape;
  shape.channels = 1;
  shape.num_classes = 10;
  shape.train_size = 200;
  shape.test_size = 20;
  const std::vector<std::string> classes = {"0", "1", "2", "3", "4",
                                            "5", "6", "7", "8", "9"};
  const RunPlan plan = *PlanRun(options, shape, 0, 1, 0);
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  std::unique_ptr<ModelReplica> replica = *ModelReplica::Create(
      options, plan.config, plan.placement, communicator, phases, nullptr);
  EXPECT_FALSE(ResumeLatest(dir, *replica, plan, options, classes)->has_value());

  RankCheckpoint state = WrittenBy(1, 6, 0, 60);
  state.class_names = classes;
  state.loss_scaler.scale = 512.0;
  CaptureRngState(-1, state);
  ASSERT_TRUE(WriteCheckpointFiles(*replica->Snapshot(dir, state)).ok());
  std::ostringstream log;
  ASSERT_TRUE(PublishCheckpoint(dir, 6, 2, log).ok());
  const absl::StatusOr<std::optional<ResumePoint>> at =
      ResumeLatest(dir, *replica, plan, options, classes);
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ((*at)->step, 6);
  EXPECT_EQ((*at)->position, (DataPosition{0, 60}));
  EXPECT_EQ((*at)->loss_scaler.scale, 512.0);
  EXPECT_EQ(ResumeLatest(dir, *replica, plan, options, {"other"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::trainer
