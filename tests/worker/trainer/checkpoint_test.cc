#include "worker/trainer/run/checkpoint.h"

#include <sys/fsuid.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
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

// A run's stopping point before its end (a search's rung) is marked kept: a
// later run into the same directory never prunes it, and it does not count
// towards `keep`.
TEST(CheckpointDirectoryTest, PruneLeavesCheckpointsMarkedKeptAndDoesNotCountThem) {
  const CheckpointDirectory dir(FreshDirectory("prune-kept"));
  for (const int64_t step : {10, 20, 30, 40, 50})
    fs::create_directories(dir.StepDir(step));
  std::ofstream(dir.KeepMarkerPath(10)) << "stopped at step 10\n";
  ASSERT_TRUE(dir.Prune(50, 2).ok());
  EXPECT_EQ(Entries(dir.root()),
            (std::vector<std::string>{"step-000000000010", "step-000000000040",
                                      "step-000000000050"}));
}

// Makes `dir`'s step directories below `step` impossible to remove: each
// holds a file and is made read-only, and the caller runs the prune with the
// filesystem identity of `nobody` where the test runs as root (root removes
// anything). `dir` itself is made writable by anyone, so that `latest` can
// still be written.
void MakeOldStepsUnremovable(const CheckpointDirectory& dir, int64_t step) {
  fs::permissions(dir.root(), fs::perms::all);
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.root())) {
    if (entry.path().string() >= dir.StepDir(step)) continue;
    std::ofstream(entry.path() / "model.pt") << "model";
    fs::permissions(
        entry.path(),
        fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
        fs::perm_options::remove);
  }
}

// Runs `body` on a thread of its own that acts on files as `nobody` when the
// test runs as root (setfsuid changes the calling thread only).
void RunAsNobody(const std::function<void()>& body) {
  std::thread([&body] {
    if (::geteuid() == 0) {
      ::setfsgid(65534);
      ::setfsuid(65534);
    }
    body();
  }).join();
}

TEST(PublishCheckpointTest, APruneFailureIsAWarningOnlyAFailedPublishIsAnError) {
  const CheckpointDirectory dir(FreshDirectory("prune-fails"));
  for (const int64_t step : {10, 20}) fs::create_directories(dir.StepDir(step));
  MakeOldStepsUnremovable(dir, 20);
  absl::Status prune;
  absl::Status published;
  std::ostringstream log;
  RunAsNobody([&] {
    prune = dir.Prune(20, 1);
    published = PublishCheckpoint(dir, 20, 1, log);
  });
  fs::permissions(dir.StepDir(10), fs::perms::owner_all, fs::perm_options::add);
  ASSERT_FALSE(prune.ok()) << "the prune was to fail here";
  EXPECT_TRUE(published.ok()) << published;
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(20));
  EXPECT_NE(log.str().find("tessera-train: warning: checkpoint step 20 is published, "
                           "but older checkpoints were not pruned: removing " +
                           dir.StepDir(10)),
            std::string::npos)
      << log.str();

  // Without `latest` the checkpoint is not there: that still fails the run.
  const CheckpointDirectory missing(dir.root() + "/no/such/dir");
  EXPECT_FALSE(PublishCheckpoint(missing, 30, 1, log).ok());
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

TEST(CheckpointFilesTest, AnotherWorldSizeLoadsTheModelAndTheGlobalPositionOnly) {
  const CheckpointDirectory dir(FreshDirectory("world"));
  torch::manual_seed(4);
  torch::nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  // Written by a world of 2: both ranks' files, rank 0 with the model.
  for (int rank = 0; rank < 2; ++rank) {
    RankCheckpoint state;
    state.rank = rank;
    state.world_size = 2;
    state.position = {4, 1, 6, 96};
    state.loss_scaler = {512.0, 3};
    state.class_names = {"cat", "dog"};
    CaptureRngState(-1, state);
    ASSERT_TRUE(SaveCheckpointFiles(dir, state, *model, optimizer).ok());
  }
  // Resumed by rank 3 of 4: the model, rank 0's position and loss scale, the
  // class names, and no random generator state (rebuilt by the trainer).
  torch::manual_seed(5);
  torch::nn::Linear other(2, 2);
  torch::optim::SGD other_optimizer(other->parameters(), torch::optim::SGDOptions(0.1));
  absl::StatusOr<RankCheckpoint> loaded =
      LoadCheckpointFiles(dir, 4, 3, 4, *other, other_optimizer);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(torch::equal(other->weight, model->weight));
  EXPECT_EQ(loaded->rank, 3);
  EXPECT_EQ(loaded->world_size, 2) << "the writer's world size";
  EXPECT_EQ(loaded->position.step, 4);
  EXPECT_EQ(loaded->position.sample_in_epoch, 96);
  EXPECT_EQ(loaded->loss_scaler.scale, 512.0);
  EXPECT_TRUE(loaded->cpu_rng_state.empty());
  EXPECT_EQ(loaded->class_names, (std::vector<std::string>{"cat", "dog"}));
  // The class mapping is written beside the model for people and tools.
  EXPECT_EQ(Slurp(dir.StepDir(4) + "/classes.json"),
            "{\n \"classes\": [\n  \"cat\",\n  \"dog\"\n ]\n}\n");
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
