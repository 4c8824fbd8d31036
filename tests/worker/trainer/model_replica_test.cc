// This rank's replica of the model (run/model_replica.h) in a world of one:
// built from the seed, grouped for the optimizer, sized, and moved through a
// checkpoint unchanged.
#include "worker/trainer/run/model_replica.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "worker/trainer/model/vit_weights.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

ViTConfig Micro() {
  const absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-micro", 1, 10);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::unique_ptr<ModelReplica> Build(const TrainerOptions& options,
                                    Communicator& communicator, PhaseReporter& phases,
                                    std::ostream* log = nullptr) {
  absl::StatusOr<std::unique_ptr<ModelReplica>> replica = ModelReplica::Create(
      options, Micro(), DevicePlacement{}, communicator, phases, log);
  EXPECT_TRUE(replica.ok()) << replica.status();
  return replica.ok() ? *std::move(replica) : nullptr;
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/model_replica_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ModelReplicaTest, TrainsEveryParameterInTwoGroupsAtStageZero) {
  TrainerOptions options;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  const std::unique_ptr<ModelReplica> replica = Build(options, communicator, phases);
  ASSERT_NE(replica, nullptr);
  int64_t count = 0;
  for (const at::Tensor& p : replica->model()->parameters()) count += p.numel();
  EXPECT_EQ(replica->parameter_count(), count);
  EXPECT_EQ(replica->parameters().size(), replica->model()->parameters().size());
  EXPECT_EQ(replica->zero_stage(), 0);
  EXPECT_EQ(replica->zero(), nullptr);
  EXPECT_EQ(replica->optimizer().param_groups().size(), 2u);
  EXPECT_EQ(replica->group_scales(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(replica->group_heads(), (std::vector<bool>{true, true}));
  // AdamW keeps two moments per element.
  EXPECT_EQ(replica->OptimizerStateBytes(), 2 * count * 4);
  EXPECT_EQ(replica->GradientBytes(), count * 4);
  EXPECT_EQ(replica->ParameterBytes(), count * 4);
  EXPECT_THAT(replica->DescribeState(), HasSubstr("ZeRO stage 0: this rank holds " +
                                                  std::to_string(2 * count * 4)));
  EXPECT_EQ(phases.phase(), RankPhase::kStartup);  // after the broadcast
}

TEST(ModelReplicaTest, StepsOnTheGradientsAndTellsNonFiniteOnes) {
  TrainerOptions options;
  options.optimizer = "sgd";
  options.momentum = 0.0;
  options.weight_decay = 0.0;
  options.lr = 0.5;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  const std::unique_ptr<ModelReplica> replica = Build(options, communicator, phases);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(replica->Sizes().gradient_bytes, replica->GradientBytes());
  EXPECT_EQ(replica->Sizes().parameter_bytes, replica->ParameterBytes());
  // A gradient of ones for every element, as the loop makes it.
  auto backward = [&] {
    replica->reducer().ZeroGradients();
    replica->reducer().PrepareForBackward(false);
    torch::Tensor sum = torch::zeros({});
    for (const at::Tensor& p : replica->parameters()) sum = sum + p.sum();
    sum.backward();
    ASSERT_TRUE(replica->reducer().FinishBackward().ok());
  };
  const at::Tensor head = replica->parameters().back();
  const at::Tensor before = head.detach().clone();
  backward();
  EXPECT_FALSE(*replica->AnyNonFiniteGradient());
  // Clipped to a global norm of 1 over every element: each moves by
  // lr / sqrt(count).
  ASSERT_TRUE(replica->Step(1.0).ok());
  const double moved = (before - head.detach()).abs().max().item<double>();
  EXPECT_NEAR(moved, 0.5 / std::sqrt(static_cast<double>(replica->parameter_count())),
              1e-6);
  backward();
  torch::NoGradGuard no_grad;
  head.grad()[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(*replica->AnyNonFiniteGradient());
}

TEST(ModelReplicaTest, TheSeedAloneDecidesTheInitialModel) {
  TrainerOptions options;
  options.seed = 5;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  const std::string first = *Build(options, communicator, phases)->Fingerprint();
  EXPECT_EQ(*Build(options, communicator, phases)->Fingerprint(), first);
  options.seed = 6;
  EXPECT_NE(*Build(options, communicator, phases)->Fingerprint(), first);
  EXPECT_EQ(first.size(), 16u);
}

TEST(ModelReplicaTest, FineTuningGroupsFollowTheLayerTable) {
  TrainerOptions options;
  options.layer_decay = 0.75;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  const std::unique_ptr<ModelReplica> replica = Build(options, communicator, phases);
  ASSERT_NE(replica, nullptr);
  const std::vector<ParameterGroup> table =
      LayerDecayParameterGroups(*replica->model(), 0.75);
  ASSERT_EQ(replica->group_scales().size(), table.size());
  for (size_t g = 0; g < table.size(); ++g) {
    EXPECT_EQ(replica->group_scales()[g], table[g].lr_scale);
    EXPECT_EQ(replica->group_heads()[g], table[g].head);
  }
}

TEST(ModelReplicaTest, AWorldOfOneHasNothingToShard) {
  TrainerOptions options;
  options.zero_stage = 2;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  std::ostringstream log;
  const std::unique_ptr<ModelReplica> replica =
      Build(options, communicator, phases, &log);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(replica->zero_stage(), 0);
  EXPECT_EQ(replica->zero(), nullptr);
  EXPECT_THAT(log.str(), HasSubstr("nothing to shard in a world of one"));
}

TEST(ModelReplicaTest, ACheckpointBringsBackTheModelAndItsStep) {
  const CheckpointDirectory dir(TempDir("round_trip"));
  TrainerOptions options;
  options.seed = 11;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  const std::unique_ptr<ModelReplica> written = Build(options, communicator, phases);
  ASSERT_NE(written, nullptr);
  EXPECT_FALSE(written->LoadLatestCheckpoint(dir)->has_value());  // none yet

  RankCheckpoint state;
  state.position.step = 3;
  state.class_names = {"a", "b"};
  absl::StatusOr<CheckpointFiles> files = written->Snapshot(dir, state);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_TRUE(WriteCheckpointFiles(*files).ok());
  std::ostringstream log;
  ASSERT_TRUE(PublishCheckpoint(dir, 3, 2, log).ok());

  options.seed = 12;  // another initial model, replaced by the checkpoint's
  const std::unique_ptr<ModelReplica> read = Build(options, communicator, phases);
  ASSERT_NE(read, nullptr);
  ASSERT_NE(*read->Fingerprint(), *written->Fingerprint());
  const absl::StatusOr<std::optional<RankCheckpoint>> loaded =
      read->LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->position.step, 3);
  EXPECT_EQ((*loaded)->class_names, state.class_names);
  EXPECT_EQ(*read->Fingerprint(), *written->Fingerprint());
}

}  // namespace
}  // namespace tessera::trainer
