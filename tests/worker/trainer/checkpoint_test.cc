#include "worker/trainer/checkpoint.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;

std::string FreshDirectory(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WriteFileAtomicallyTest, ReplacesTheFileAndLeavesNoTemporaries) {
  const std::string dir = FreshDirectory("atomic");
  const std::string path = dir + "/file";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string("sec\0ond", 7)).ok());
  EXPECT_EQ(Slurp(path), std::string("sec\0ond", 7));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"file"});
}

TEST(WriteFileAtomicallyTest, FailsWithAStatusWhereTheDirectoryIsMissing) {
  const std::string dir = FreshDirectory("atomic-missing");
  EXPECT_FALSE(WriteFileAtomically(dir + "/no/such/dir/file", "x").ok());
}

TEST(CheckpointDirectoryTest, LatestNamesThePublishedStep) {
  const CheckpointDirectory dir(FreshDirectory("latest"));
  absl::StatusOr<std::optional<int64_t>> none = dir.LatestStep();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(dir.PublishLatest(120).ok());
  EXPECT_EQ(Slurp(dir.root() + "/latest"), "step-000000000120\n");
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(120));
  EXPECT_EQ(dir.StepDir(120), dir.root() + "/step-000000000120");
  EXPECT_EQ(dir.RankPath(120, 3), dir.root() + "/step-000000000120/rank-00003.pt");
}

TEST(CheckpointDirectoryTest, AnUnreadableLatestIsDataLoss) {
  const CheckpointDirectory dir(FreshDirectory("latest-bad"));
  std::ofstream(dir.root() + "/latest") << "garbage\n";
  EXPECT_EQ(dir.LatestStep().status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointDirectoryTest, PruneKeepsTheNewestCompleteOnesAndUnfinishedNewerOnes) {
  const CheckpointDirectory dir(FreshDirectory("prune"));
  for (const int64_t step : {10, 20, 30, 40, 50})
    fs::create_directories(dir.StepDir(step));
  // Step 50 is being written; 40 is the latest complete one.
  ASSERT_TRUE(dir.Prune(40, 2).ok());
  EXPECT_EQ(Entries(dir.root()),
            (std::vector<std::string>{"step-000000000030", "step-000000000040",
                                      "step-000000000050"}));
}

TEST(CheckpointFilesTest, ModelOptimizerAndRankStateRoundTrip) {
  const CheckpointDirectory dir(FreshDirectory("files"));
  torch::manual_seed(1);
  torch::nn::Linear model(4, 3);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(0.1));
  const torch::Tensor input = torch::randn({8, 4});
  for (int i = 0; i < 2; ++i) {
    optimizer.zero_grad();
    model->forward(input).square().mean().backward();
    optimizer.step();
  }
  RankCheckpoint state;
  state.rank = 0;
  state.world_size = 2;
  state.position = {7, 1, 3};
  state.loss_scaler = {1024.0, 17};
  CaptureRngState(-1, state);
  ASSERT_TRUE(SaveCheckpointFiles(dir, state, *model, optimizer).ok());
  EXPECT_TRUE(fs::exists(dir.ModelPath(7)));
  EXPECT_TRUE(fs::exists(dir.RankPath(7, 0)));

  torch::manual_seed(2);
  torch::nn::Linear restored(4, 3);
  torch::optim::AdamW restored_optimizer(restored->parameters(),
                                         torch::optim::AdamWOptions(0.1));
  absl::StatusOr<RankCheckpoint> loaded =
      LoadCheckpointFiles(dir, 7, 0, 2, *restored, restored_optimizer);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->position.step, 7);
  EXPECT_EQ(loaded->position.epoch, 1);
  EXPECT_EQ(loaded->position.batch_in_epoch, 3);
  EXPECT_EQ(loaded->loss_scaler.scale, 1024.0);
  EXPECT_EQ(loaded->loss_scaler.good_steps, 17);
  EXPECT_EQ(loaded->cpu_rng_state, state.cpu_rng_state);
  EXPECT_TRUE(torch::equal(restored->weight, model->weight));
  EXPECT_TRUE(torch::equal(restored->bias, model->bias));

  // The optimizer's moments came back too: one more step agrees exactly.
  optimizer.zero_grad();
  restored_optimizer.zero_grad();
  model->forward(input).square().mean().backward();
  optimizer.step();
  restored->forward(input).square().mean().backward();
  restored_optimizer.step();
  EXPECT_TRUE(torch::equal(restored->weight, model->weight));
}

TEST(CheckpointFilesTest, AnotherWorldSizeCannotResume) {
  const CheckpointDirectory dir(FreshDirectory("world"));
  torch::nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  RankCheckpoint state;
  state.world_size = 2;
  state.position.step = 4;
  CaptureRngState(-1, state);
  ASSERT_TRUE(SaveCheckpointFiles(dir, state, *model, optimizer).ok());
  EXPECT_EQ(LoadCheckpointFiles(dir, 4, 0, 4, *model, optimizer).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(LoadCheckpointFiles(dir, 5, 0, 2, *model, optimizer).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RngStateTest, RestoringReplaysTheSameRandomNumbers) {
  RankCheckpoint state;
  torch::manual_seed(3);
  torch::randn({5});
  CaptureRngState(-1, state);
  const torch::Tensor first = torch::randn({16});
  torch::randn({100});
  ASSERT_TRUE(RestoreRngState(-1, state).ok());
  EXPECT_TRUE(torch::equal(torch::randn({16}), first));
}

}  // namespace
}  // namespace tessera::trainer
