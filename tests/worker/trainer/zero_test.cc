// ZeRO stages 1, 2 and 3 (dist/zero_optimizer.h) in whole training runs of
// two and three Gloo ranks on the CPU: the same parameters as stage 0 (DDP),
// the optimizer state (and from stage 2 the gradients) divided between the
// ranks, and sharded checkpoints that resume at another world size and at
// other stages.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/metric_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "tests/worker/trainer/gloo_group.h"
#include "worker/trainer/data/synthetic_dataset.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"
#include "worker/trainer/run/zero_checkpoint.h"

namespace tessera::trainer {
namespace {

using testing::FakeCoordinatorClient;
using testing::RunGlooGroup;

ImageDataset Synthetic(int64_t size, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = 3;
  options.split = split;
  return *MakeSyntheticDataset(options);
}

// vit-micro with accumulation and clipping on, and no dropout (a run resumed
// at another world size rebuilds its dropout generator).
TrainerOptions ZeroRun(const std::string& optimizer, int stage) {
  TrainerOptions options;
  options.dataset = "synthetic";
  options.batch_size = 8;
  options.grad_accum = 2;
  options.clip_grad_norm = 0.5;
  options.lr = 3e-3;
  options.optimizer = optimizer;
  options.max_steps = 30;
  options.metrics_every = 10;
  options.epochs = 10;
  options.zero_stage = stage;
  // Small buckets: several per rank, and parameters cut by shard edges.
  options.bucket_cap_mb = 0.02;
  options.first_bucket_mb = 0.01;
  return options;
}

struct RankRun {
  TrainingOutcome outcome;
  std::map<std::string, double> first_values;  // each metric's first report
};

// Trains `world` ranks (Gloo on loopback, or alone) and returns each rank's
// outcome and first reported metrics.
std::vector<RankRun> Train(int world, const TrainerOptions& options,
                           const ImageDataset& train, const ImageDataset& test) {
  std::vector<RankRun> runs(static_cast<size_t>(world));
  auto body = [&](int rank, Communicator& communicator) {
    FakeCoordinatorClient coordinator;
    MetricsReporterOptions reporting;
    reporting.flush_interval = absl::InfiniteDuration();
    auto reporter = MetricsReporter::Create(reporting, &coordinator);
    ASSERT_TRUE(reporter.ok()) << reporter.status();
    Trainer trainer(options, train, test, communicator, **reporter);
    absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
    RankRun& run = runs[static_cast<size_t>(rank)];
    run.outcome = *outcome;
    for (const MetricSample& sample : coordinator.received()) {
      run.first_values.emplace(sample.name, sample.value);
    }
  };
  if (world == 1) {
    LocalCommunicator alone;
    body(0, alone);
  } else {
    RunGlooGroup(world, body, absl::Seconds(60));
  }
  return runs;
}

std::string FreshDirectory(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The model parameters of checkpoint `step` in `dir`, flattened into one.
torch::Tensor CheckpointParameters(const std::string& dir, int64_t step,
                                   const ImageDataset& train) {
  const absl::StatusOr<ViTConfig> config =
      ResolveViTConfig("vit-micro", train.channels, train.num_classes);
  EXPECT_TRUE(config.ok()) << config.status();
  VisionTransformer model(*config);
  torch::serialize::InputArchive archive;
  archive.load_from(CheckpointDirectory(dir).ModelPath(step));
  torch::serialize::InputArchive weights;
  archive.read("model", weights);
  model->load(weights);
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : model->parameters()) flat.push_back(p.reshape({-1}));
  return torch::cat(flat);
}

double RelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

// Trains 30 steps at `stage` on `world` ranks (the same global batch) with a
// final checkpoint and returns its parameters.
torch::Tensor FinalParameters(const std::string& optimizer, int stage,
                              const ImageDataset& train, const ImageDataset& test,
                              double layer_decay = 1.0, int world = 2) {
  TrainerOptions options = ZeroRun(optimizer, stage);
  options.layer_decay = layer_decay;
  options.batch_size = 24 / (world * options.grad_accum);
  options.checkpoint_dir =
      FreshDirectory(absl::StrCat("zero-", optimizer, stage, "-", world));
  const std::vector<RankRun> runs = Train(world, options, train, test);
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.outcome.param_hash, runs[0].outcome.param_hash);
  }
  return CheckpointParameters(options.checkpoint_dir, 30, train);
}

class ZeroOptimizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZeroOptimizerTest, StagesOneTwoAndThreeReachStageZerosParameters) {
  const ImageDataset train = Synthetic(1024, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  const torch::Tensor ddp = FinalParameters(GetParam(), 0, train, test);
  for (const int stage : {1, 2, 3}) {
    const torch::Tensor zero = FinalParameters(GetParam(), stage, train, test);
    const double difference = RelativeDifference(zero, ddp);
    std::cout << GetParam() << " stage " << stage << ": relative difference "
              << difference << " from stage 0\n";
    EXPECT_LE(difference, 1e-5) << "stage " << stage;
  }
}

INSTANTIATE_TEST_SUITE_P(AdamWAndLamb, ZeroOptimizerTest,
                         ::testing::Values("adamw", "lamb"));

// Three ranks cut every bucket and unit into three uneven shards.
TEST(ZeroTest, ThreeRanksAtEachStageReachStageZerosParameters) {
  const ImageDataset train = Synthetic(1024, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  const torch::Tensor ddp = FinalParameters("adamw", 0, train, test, 1.0, 3);
  for (const int stage : {1, 2, 3}) {
    const torch::Tensor zero = FinalParameters("adamw", stage, train, test, 1.0, 3);
    const double difference = RelativeDifference(zero, ddp);
    std::cout << "3 ranks, stage " << stage << ": relative difference " << difference
              << " from stage 0\n";
    EXPECT_LE(difference, 1e-5) << "stage " << stage;
  }
}

TEST(ZeroTest, SgdWithMomentumReachesStageZerosParameters) {
  const ImageDataset train = Synthetic(1024, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  const torch::Tensor ddp = FinalParameters("sgd", 0, train, test);
  for (const int stage : {2, 3}) {
    const torch::Tensor zero = FinalParameters("sgd", stage, train, test);
    EXPECT_LE(RelativeDifference(zero, ddp), 1e-5) << "stage " << stage;
  }
}

// The fine-tuning optimizer: a group per layer at its own learning rate.
TEST(ZeroTest, LayerWiseDecayGroupsReachStageZerosParameters) {
  const ImageDataset train = Synthetic(1024, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  const torch::Tensor ddp = FinalParameters("adamw", 0, train, test, 0.75);
  for (const int stage : {1, 3}) {
    const torch::Tensor zero = FinalParameters("adamw", stage, train, test, 0.75);
    EXPECT_LE(RelativeDifference(zero, ddp), 1e-5) << "stage " << stage;
  }
}

TEST(ZeroTest, TheRanksDivideTheOptimizerStateTheGradientsAndAtStageThreeTheParameters) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  std::map<int, std::vector<RankRun>> by_stage;
  for (const int stage : {0, 1, 2, 3}) {
    TrainerOptions options = ZeroRun("adamw", stage);
    options.max_steps = 2;
    options.metrics_every = 1;
    by_stage[stage] = Train(2, options, train, test);
  }
  const double state0 = by_stage[0][0].first_values.at(kOptimizerStateBytesMetricName);
  const double gradients0 = by_stage[0][0].first_values.at(kGradientBytesMetricName);
  EXPECT_GT(state0, 0);
  // Each bucket is cut in two halves, the second shorter by at most one
  // element: per bucket, half an element of padding in each state tensor.
  // (Buckets close before a parameter that would overflow them, so there are
  // fewer than twice as many as the caps alone would give.)
  const double buckets = 2 + 2 * gradients0 / (0.02 * (1 << 20));
  const double slack = buckets * 2 * sizeof(float);
  for (const int stage : {1, 2}) {
    double total = 0;
    for (const RankRun& rank : by_stage[stage]) {
      const double state = rank.first_values.at(kOptimizerStateBytesMetricName);
      EXPECT_NEAR(state, state0 / 2, slack) << "stage " << stage;
      total += state;
      const double gradients = rank.first_values.at(kGradientBytesMetricName);
      EXPECT_NEAR(gradients, stage == 2 ? gradients0 / 2 : gradients0, slack / 2)
          << "stage " << stage;
    }
    EXPECT_EQ(total, state0) << "stage " << stage;
  }
  // The parameters: whole at stages 1 and 2 (their flat buffers, padded);
  // at stage 3 half of them at rest plus the gathered blocks in flight (for a
  // model of few blocks, such as this one, those are not small).
  const double parameters0 = by_stage[0][0].first_values.at(kParameterBytesMetricName);
  for (const int stage : {1, 2}) {
    for (const RankRun& rank : by_stage[stage]) {
      EXPECT_NEAR(rank.first_values.at(kParameterBytesMetricName), parameters0, slack)
          << "stage " << stage;
    }
  }
  for (const RankRun& rank : by_stage[3]) {
    const double parameters = rank.first_values.at(kParameterBytesMetricName);
    std::cout << "FIGURE zero_stage3_parameter_bytes=" << parameters
              << " (stage 0: " << parameters0 << ")\n";
    EXPECT_GT(parameters, parameters0 / 2 + slack);
  }
}

// Weights loaded with --init-from (fine-tuning) reach the parameters at stage
// 3, whose parameters are sharded and freed at rest, as at stage 0.
TEST(ZeroTest, AStageThreeRunFromInitFromWeightsReachesStageZerosParameters) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  const absl::StatusOr<ViTConfig> config =
      ResolveViTConfig("vit-micro", train.channels, train.num_classes);
  ASSERT_TRUE(config.ok()) << config.status();
  torch::manual_seed(11);
  VisionTransformer pretrained(*config);
  const std::string weights =
      FreshDirectory("zero-init-from") + "/pretrained.safetensors";
  ASSERT_TRUE(ExportSafetensors(*pretrained, WeightLayout::kTessera, {}, weights).ok());
  std::map<int, torch::Tensor> by_stage;
  for (const int stage : {0, 3}) {
    TrainerOptions options = ZeroRun("adamw", stage);
    options.init_from = weights;
    options.max_steps = 6;
    options.seed = 2;  // another start than the weights'
    options.checkpoint_dir = FreshDirectory(absl::StrCat("zero-init-from-", stage));
    const std::vector<RankRun> runs = Train(2, options, train, test);
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].outcome.param_hash, runs[1].outcome.param_hash);
    by_stage[stage] = CheckpointParameters(options.checkpoint_dir, 6, train);
  }
  // Stage 0 starts from the weights (finetune_test): a stage 3 that did not
  // would end elsewhere.
  EXPECT_LE(RelativeDifference(by_stage[3], by_stage[0]), 1e-5);
}

// A checkpoint of `stage` on two ranks at step 4 of 8, resumed by `resumes`
// (world size, stage, tolerance) with the same global batch: each ends where
// the uninterrupted run ends.
struct Resume {
  int world;
  int stage;
  double tolerance;  // another world size sums in another order
};

void ExpectResumesEndWhereTheRunEnds(int stage, const std::vector<Resume>& resumes) {
  const ImageDataset train = Synthetic(1024, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = ZeroRun("lamb", stage);
  options.max_steps = 8;
  options.checkpoint_every = 4;
  options.checkpoint_dir = FreshDirectory(absl::StrCat("zero-reshard-from-", stage));
  Train(2, options, train, test);
  const torch::Tensor uninterrupted =
      CheckpointParameters(options.checkpoint_dir, 8, train);
  if (stage > 0) {
    ASSERT_TRUE(std::filesystem::exists(
        ZeroShardPath(CheckpointDirectory(options.checkpoint_dir), 4, 1)));
  }
  for (const Resume& r : resumes) {
    const std::string dir = FreshDirectory(
        absl::StrCat("zero-resume-", stage, "-to-", r.world, "-", r.stage));
    std::filesystem::copy(options.checkpoint_dir, dir,
                          std::filesystem::copy_options::recursive);
    ASSERT_TRUE(CheckpointDirectory(dir).PublishLatest(4).ok());
    TrainerOptions resumed = options;
    resumed.checkpoint_dir = dir;
    resumed.resume = true;
    resumed.zero_stage = r.stage;
    resumed.batch_size = options.batch_size * 2 / r.world;
    const std::vector<RankRun> runs = Train(r.world, resumed, train, test);
    ASSERT_EQ(runs.size(), static_cast<size_t>(r.world));
    EXPECT_EQ(runs[0].outcome.resumed_from, 4);
    const double difference =
        RelativeDifference(CheckpointParameters(dir, 8, train), uninterrupted);
    std::cout << "stage " << stage << " on 2 ranks resumed on " << r.world << " at stage "
              << r.stage << ": relative difference " << difference << "\n";
    EXPECT_LE(difference, r.tolerance) << r.world << " ranks at stage " << r.stage;
  }
}

// A stage-2 checkpoint of two ranks, resumed alone (with the whole batch) and
// by two ranks at stages 0 and 1.
TEST(ZeroTest, AStageTwoCheckpointResumesAtOneRankAndAtOtherStages) {
  ExpectResumesEndWhereTheRunEnds(
      2, {Resume{1, 2, 1e-4}, Resume{2, 0, 1e-5}, Resume{2, 1, 1e-5}});
}

TEST(ZeroTest, AStageThreeCheckpointResumesAtOtherWorldSizesAndStages) {
  ExpectResumesEndWhereTheRunEnds(3, {Resume{4, 3, 1e-4}, Resume{1, 0, 1e-4},
                                      Resume{2, 0, 1e-5}, Resume{2, 2, 1e-5}});
}

TEST(ZeroTest, AStageZeroCheckpointResumesAtEachShardedStage) {
  ExpectResumesEndWhereTheRunEnds(
      0, {Resume{2, 1, 1e-5}, Resume{2, 2, 1e-5}, Resume{2, 3, 1e-5}});
}

TEST(ZeroTest, AStageTwoCheckpointResumesAtStageThreeOnFourRanks) {
  ExpectResumesEndWhereTheRunEnds(2, {Resume{4, 3, 1e-4}});
}

// A sharded checkpoint with a shard file missing, or another rank's in its
// place, is refused before the first step at any stage, naming the file.
TEST(ZeroTest, AResumeFromBrokenShardsFailsNamingTheCause) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = ZeroRun("adamw", 2);
  options.max_steps = 2;
  options.checkpoint_every = 2;
  options.checkpoint_dir = FreshDirectory("zero-broken");
  Train(2, options, train, test);
  ASSERT_TRUE(std::filesystem::exists(
      ZeroShardPath(CheckpointDirectory(options.checkpoint_dir), 2, 1)));

  struct Case {
    std::string name;
    std::string cause;  // what the error names
  };
  for (const Case& c : {Case{"missing", "optimizer-rank-00001"},
                        Case{"another rank's", "written as another rank"},
                        Case{"another model's", "another model"}}) {
    // A copy of the checkpoint, broken: rank 1's shard gone, rank 0's in its
    // place (its pieces would cover half of every bucket twice), or one
    // written for a model of other parameters.
    std::string tag = c.name;
    std::replace(tag.begin(), tag.end(), ' ', '-');
    tag.erase(std::remove(tag.begin(), tag.end(), '\''), tag.end());
    const std::string dir = FreshDirectory("zero-broken-" + tag);
    std::filesystem::copy(options.checkpoint_dir, dir,
                          std::filesystem::copy_options::recursive);
    const CheckpointDirectory copy(dir);
    if (c.name == "missing") {
      std::filesystem::remove(ZeroShardPath(copy, 2, 1));
    } else if (c.name == "another model's") {
      auto foreign = SerializeZeroShard(copy, 2, 1, 2, {}, {768, 10, 3072});
      ASSERT_TRUE(foreign.ok());
      std::ofstream(foreign->first, std::ios::binary | std::ios::trunc)
          << foreign->second;
    } else {
      std::filesystem::copy_file(ZeroShardPath(copy, 2, 0), ZeroShardPath(copy, 2, 1),
                                 std::filesystem::copy_options::overwrite_existing);
    }
    TrainerOptions resumed = options;
    resumed.checkpoint_dir = dir;
    resumed.resume = true;
    resumed.max_steps = 4;
    for (const int stage : {0, 3}) {
      resumed.zero_stage = stage;
      std::vector<absl::Status> statuses(2);
      RunGlooGroup(
          2,
          [&](int rank, Communicator& communicator) {
            FakeCoordinatorClient coordinator;
            MetricsReporterOptions reporting;
            reporting.flush_interval = absl::InfiniteDuration();
            auto reporter = MetricsReporter::Create(reporting, &coordinator);
            ASSERT_TRUE(reporter.ok());
            Trainer trainer(resumed, train, test, communicator, **reporter);
            statuses[static_cast<size_t>(rank)] = trainer.Run().status();
          },
          absl::Seconds(60));
      for (const absl::Status& status : statuses) {
        EXPECT_FALSE(status.ok()) << c.name << " at stage " << stage;
        EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(c.cause))
            << c.name << " at stage " << stage << ": " << status;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::trainer
