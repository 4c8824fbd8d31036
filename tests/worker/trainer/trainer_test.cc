#include "worker/trainer/trainer.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "worker/trainer/communicator.h"
#include "worker/trainer/gloo_communicator.h"
#include "worker/trainer/metrics_reporter.h"
#include "worker/trainer/synthetic_dataset.h"

namespace tessera::trainer {
namespace {

using testing::FakeCoordinatorClient;

ImageDataset Synthetic(int64_t size, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = 3;
  options.split = split;
  return *MakeSyntheticDataset(options);
}

TrainerOptions SmallRun() {
  TrainerOptions options;
  options.dataset = "synthetic";
  options.batch_size = 32;
  options.lr = 3e-3;
  options.max_steps = 60;
  options.metrics_every = 20;
  options.epochs = 10;
  return options;
}

MetricsReporterOptions QuietReporting() {
  MetricsReporterOptions options;
  options.flush_interval = absl::InfiniteDuration();
  return options;
}

TEST(TrainerTest, LearnsSyntheticDataFarAboveChance) {
  const ImageDataset train = Synthetic(2048, Split::kTrain);
  const ImageDataset test = Synthetic(512, Split::kTest);
  LocalCommunicator communicator;
  auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
  ASSERT_TRUE(reporter.ok());
  Trainer trainer(SmallRun(), train, test, communicator, **reporter);
  const absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->steps, 60);
  EXPECT_EQ(outcome->train_images, 60 * 32);
  EXPECT_GT(outcome->test_accuracy, 0.5);  // chance is 0.1
  EXPECT_LT(outcome->test_loss, std::log(10.0));
  EXPECT_EQ(outcome->param_hash.size(), 16u);
}

TEST(TrainerTest, ReportsTheDocumentedMetricsEveryKStepsAndTestMetricsAtEpochEnds) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  LocalCommunicator communicator;
  FakeCoordinatorClient coordinator;
  auto reporter = MetricsReporter::Create(QuietReporting(), &coordinator);
  ASSERT_TRUE(reporter.ok());
  TrainerOptions options = SmallRun();
  options.max_steps = 0;
  options.epochs = 2;  // 256 / 32 = 8 steps per epoch, 16 in all
  options.metrics_every = 3;
  Trainer trainer(options, train, test, communicator, **reporter);
  ASSERT_TRUE(trainer.Run().ok());
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());

  std::map<std::string, std::vector<int64_t>> steps_by_name;
  for (const MetricSample& point : coordinator.received()) {
    steps_by_name[point.name].push_back(point.step);
    EXPECT_TRUE(std::isfinite(point.value)) << point.name;
  }
  const std::vector<int64_t> every_three = {3, 6, 9, 12, 15, 16};
  for (const char* name : {"loss", "images_per_sec", "step_time_ms", "epoch"}) {
    EXPECT_EQ(steps_by_name[name], every_three) << name;
  }
  EXPECT_EQ(steps_by_name["test_accuracy"], (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(steps_by_name["test_loss"], (std::vector<int64_t>{8, 16}));
}

TEST(TrainerTest, FailsWhenAShardIsSmallerThanOneBatch) {
  const ImageDataset train = Synthetic(16, Split::kTrain);
  const ImageDataset test = Synthetic(16, Split::kTest);
  LocalCommunicator communicator;
  auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
  ASSERT_TRUE(reporter.ok());
  Trainer trainer(SmallRun(), train, test, communicator, **reporter);
  EXPECT_EQ(trainer.Run().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TrainerTest, SameSeedGivesTheSameParameterHash) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 5;
  std::vector<std::string> hashes;
  for (const int64_t seed : {7, 7, 8}) {
    options.seed = seed;
    LocalCommunicator communicator;
    auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
    ASSERT_TRUE(reporter.ok());
    Trainer trainer(options, train, test, communicator, **reporter);
    const absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    hashes.push_back(outcome->param_hash);
  }
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_NE(hashes[0], hashes[2]);
}

// Runs two ranks, one thread each, over Gloo on loopback.
std::vector<TrainingOutcome> TrainTwoRanks(const TrainerOptions& options,
                                           const ImageDataset& train,
                                           const ImageDataset& test) {
  const absl::Duration timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<GlooStore>> hosted =
      GlooStore::Host("127.0.0.1", 0, timeout);
  EXPECT_TRUE(hosted.ok()) << hosted.status();
  if (!hosted.ok()) return {};
  const int port = (*hosted)->port();
  std::vector<TrainingOutcome> outcomes(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<GlooStore> own = rank == 0 ? *std::move(hosted) : nullptr;
    ranks.emplace_back([&, rank, store = std::move(own)]() mutable {
      if (store == nullptr) {
        auto joined = GlooStore::Connect("127.0.0.1", port, timeout);
        ASSERT_TRUE(joined.ok()) << joined.status();
        store = *std::move(joined);
      }
      GlooOptions gloo;
      gloo.timeout = timeout;
      auto communicator = GlooCommunicator::Create(std::move(store), rank, 2, gloo);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
      ASSERT_TRUE(reporter.ok());
      Trainer trainer(options, train, test, **communicator, **reporter);
      absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      outcomes[static_cast<size_t>(rank)] = *outcome;
    });
  }
  for (std::thread& thread : ranks) thread.join();
  return outcomes;
}

TEST(TrainerTest, TwoRanksWithGradientAllReduceEndWithIdenticalParameters) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(101, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 6;
  const std::vector<TrainingOutcome> outcomes = TrainTwoRanks(options, train, test);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].steps, 6);
  EXPECT_EQ(outcomes[0].param_hash, outcomes[1].param_hash);
  // Evaluation covers the whole (odd-sized) test set on both ranks.
  EXPECT_EQ(outcomes[0].test_accuracy, outcomes[1].test_accuracy);
  EXPECT_EQ(outcomes[0].test_loss, outcomes[1].test_loss);
}

TEST(TrainerTest, TwoRanksWithoutAllReduceDriftApartButShareTestCounts) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(101, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 6;
  options.allreduce = false;
  const std::vector<TrainingOutcome> outcomes = TrainTwoRanks(options, train, test);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_NE(outcomes[0].param_hash, outcomes[1].param_hash);
  EXPECT_EQ(outcomes[0].test_accuracy, outcomes[1].test_accuracy);
}

// Data parallelism must not change the mathematics: two ranks with batch B and
// averaged gradients see, step by step, the same samples as one rank with batch
// 2B (the union of the two strided shards' batches), so they train the same model
// up to floating-point rounding.
TEST(TrainerTest, TwoRanksMatchOneRankTrainingOnTheCombinedBatch) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(200, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  options.batch_size = 16;
  const std::vector<TrainingOutcome> two = TrainTwoRanks(options, train, test);
  ASSERT_EQ(two.size(), 2u);

  options.batch_size = 32;
  LocalCommunicator communicator;
  auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
  ASSERT_TRUE(reporter.ok());
  Trainer trainer(options, train, test, communicator, **reporter);
  const absl::StatusOr<TrainingOutcome> one = trainer.Run();
  ASSERT_TRUE(one.ok()) << one.status();

  EXPECT_NEAR(two[0].test_loss, one->test_loss, 1e-4);
  EXPECT_NEAR(two[0].test_accuracy, one->test_accuracy, 0.011);
  // Training changed the model: the comparison is not between two untrained ones.
  EXPECT_LT(one->test_loss, 2.2);
}

TEST(ScheduledLearningRateTest, WarmsUpLinearlyThenDecaysToTheFloor) {
  TrainerLoopOptions loop;
  loop.warmup_fraction = 0.1;
  loop.final_lr_fraction = 0.1;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 100, loop), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 4, 100, loop), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 9, 100, loop), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 10, 100, loop), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(1.0, 55, 100, loop), 0.55, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(1.0, 100, 100, loop), 0.1, 1e-12);
  for (int64_t step = 11; step < 100; ++step) {
    EXPECT_LE(ScheduledLearningRate(1.0, step, 100, loop),
              ScheduledLearningRate(1.0, step - 1, 100, loop));
  }
}

}  // namespace
}  // namespace tessera::trainer
