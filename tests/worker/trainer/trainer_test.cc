#include "worker/trainer/run/trainer.h"

#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "worker/trainer/data/synthetic_dataset.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/gloo_communicator.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/progress.h"

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

// Trains a world of one with no coordinator.
absl::StatusOr<TrainingOutcome> TrainAlone(const TrainerOptions& options,
                                           const ImageDataset& train,
                                           const ImageDataset& test,
                                           const TrainerLoopOptions& loop = {}) {
  LocalCommunicator communicator;
  absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
      MetricsReporter::Create(QuietReporting(), nullptr);
  if (!reporter.ok()) return reporter.status();
  Trainer trainer(options, train, test, communicator, **reporter, loop);
  return trainer.Run();
}

TEST(TrainerTest, LearnsSyntheticDataFarAboveChance) {
  const ImageDataset train = Synthetic(2048, Split::kTrain);
  const ImageDataset test = Synthetic(512, Split::kTest);
  const absl::StatusOr<TrainingOutcome> outcome = TrainAlone(SmallRun(), train, test);
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
  for (const char* name :
       {"loss", "images_per_sec", "time_data_ms", "time_forward_ms", "time_backward_ms",
        "time_comm_ms", "time_optimizer_ms", "time_step_ms", "lr", "epoch"}) {
    EXPECT_EQ(steps_by_name[name], every_three) << name;
  }
  EXPECT_EQ(steps_by_name["test_accuracy"], (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(steps_by_name["test_loss"], (std::vector<int64_t>{8, 16}));
}

TEST(TrainerTest, FailsWhenAShardIsSmallerThanOneBatch) {
  const ImageDataset train = Synthetic(16, Split::kTrain);
  const ImageDataset test = Synthetic(16, Split::kTest);
  EXPECT_EQ(TrainAlone(SmallRun(), train, test).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TrainerTest, SameSeedGivesTheSameParameterHash) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 5;
  std::vector<std::string> hashes;
  for (const int64_t seed : {7, 7, 8}) {
    options.seed = seed;
    const absl::StatusOr<TrainingOutcome> outcome = TrainAlone(options, train, test);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    hashes.push_back(outcome->param_hash);
  }
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_NE(hashes[0], hashes[2]);
}

// The GPU path's data pipeline (raw uint8 batches, crops, flips, conversion,
// normalisation and the resize done by the feed on the training device) run on
// the CPU: the model trains on the same bits as with the host pipeline.
TEST(TrainerTest, FinishingBatchesOnTheDeviceTrainsExactlyLikeTheHostPipeline) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 6;
  options.augment = true;
  options.image_size = 32;  // the 28 px data is resized
  std::vector<TrainingOutcome> outcomes;
  for (const bool on_device : {false, true}) {
    TrainerLoopOptions loop;
    loop.finish_batches_on_device = on_device;
    const absl::StatusOr<TrainingOutcome> outcome =
        TrainAlone(options, train, test, loop);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    outcomes.push_back(*outcome);
  }
  EXPECT_EQ(outcomes[0].param_hash, outcomes[1].param_hash);
  EXPECT_EQ(outcomes[0].test_loss, outcomes[1].test_loss);
  EXPECT_EQ(outcomes[1].train_images, 6 * 32);
}

// Runs two ranks, one thread each, over Gloo on loopback.
std::vector<TrainingOutcome> TrainTwoRanks(const TrainerOptions& options,
                                           const ImageDataset& train,
                                           const ImageDataset& test,
                                           const TrainerLoopOptions& loop = {}) {
  const absl::Duration timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<RendezvousStore>> hosted =
      RendezvousStore::Host("127.0.0.1", 0, timeout);
  EXPECT_TRUE(hosted.ok()) << hosted.status();
  if (!hosted.ok()) return {};
  const int port = (*hosted)->port();
  std::vector<TrainingOutcome> outcomes(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<RendezvousStore> own = rank == 0 ? *std::move(hosted) : nullptr;
    ranks.emplace_back([&, rank, store = std::move(own)]() mutable {
      if (store == nullptr) {
        auto joined = RendezvousStore::Connect("127.0.0.1", port, timeout);
        ASSERT_TRUE(joined.ok()) << joined.status();
        store = *std::move(joined);
      }
      GlooOptions gloo;
      gloo.timeout = timeout;
      auto communicator = GlooCommunicator::Create(std::move(store), rank, 2, gloo);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
      ASSERT_TRUE(reporter.ok());
      Trainer trainer(options, train, test, **communicator, **reporter, loop);
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
// up to floating-point rounding. Small bucket caps spread vit-micro's gradients
// over many buckets, all-reduced while backward runs.
TEST(TrainerTest, TwoRanksMatchOneRankTrainingOnTheCombinedBatch) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(200, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  options.batch_size = 16;
  options.first_bucket_mb = 0.01;
  options.bucket_cap_mb = 0.05;  // vit-micro's 0.53 MiB of gradients: ~12 buckets
  const std::vector<TrainingOutcome> two = TrainTwoRanks(options, train, test);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].param_hash, two[1].param_hash);

  options.batch_size = 32;
  const absl::StatusOr<TrainingOutcome> one = TrainAlone(options, train, test);
  ASSERT_TRUE(one.ok()) << one.status();

  EXPECT_NEAR(two[0].test_loss, one->test_loss, 1e-4);
  EXPECT_NEAR(two[0].test_accuracy, one->test_accuracy, 0.011);
  // Training changed the model: the comparison is not between two untrained ones.
  EXPECT_LT(one->test_loss, 2.2);
}

TEST(TrainerTest, TwoRanksWithoutOverlapMatchTheOverlappedRun) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 4;
  options.first_bucket_mb = 0.01;
  options.bucket_cap_mb = 0.05;
  const std::vector<TrainingOutcome> overlapped = TrainTwoRanks(options, train, test);
  options.overlap = false;
  const std::vector<TrainingOutcome> serial = TrainTwoRanks(options, train, test);
  ASSERT_EQ(overlapped.size(), 2u);
  ASSERT_EQ(serial.size(), 2u);
  // The same sums in the same bucket layout: bit-identical parameters.
  EXPECT_EQ(overlapped[0].param_hash, serial[0].param_hash);
  EXPECT_EQ(serial[0].param_hash, serial[1].param_hash);
}

// Gradient accumulation must not change the mathematics either: two micro-batches
// of B per step see the samples one batch of 2B sees.
TEST(TrainerTest, AccumulatingTwoMicroBatchesMatchesOneBatchOfTwiceTheSize) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(200, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  std::vector<TrainingOutcome> outcomes;
  for (const auto& [batch, accum] : {std::pair{32, 1}, std::pair{16, 2}}) {
    options.batch_size = batch;
    options.grad_accum = accum;
    const absl::StatusOr<TrainingOutcome> outcome = TrainAlone(options, train, test);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    outcomes.push_back(*outcome);
  }
  EXPECT_EQ(outcomes[1].steps, 8);
  EXPECT_EQ(outcomes[1].train_images, 8 * 32);
  EXPECT_NEAR(outcomes[1].test_loss, outcomes[0].test_loss, 1e-4);
  EXPECT_LT(outcomes[0].test_loss, 2.2);
  // Accumulation really happened: the rounding differs, so the bits do.
  EXPECT_NE(outcomes[1].param_hash, outcomes[0].param_hash);
}

TEST(TrainerTest, TwoRanksAccumulatingGradientsStayInSync) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 3;
  options.batch_size = 16;
  options.grad_accum = 3;
  const std::vector<TrainingOutcome> outcomes = TrainTwoRanks(options, train, test);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].train_images, 3 * 3 * 16);
  EXPECT_EQ(outcomes[0].param_hash, outcomes[1].param_hash);
}

// Runs one rank and returns its outcome and every reported value by name, then
// step.
struct ReportedRun {
  TrainingOutcome outcome;
  std::map<std::string, std::map<int64_t, double>> values;
};

ReportedRun RunOneRankOn(const TrainingData& data, const TrainerOptions& options,
                         const TrainerLoopOptions& loop = {});

ReportedRun RunOneRank(const TrainerOptions& options, const ImageDataset& train,
                       const ImageDataset& test, const TrainerLoopOptions& loop = {}) {
  const InMemoryData data(train, test, options.dataset);
  return RunOneRankOn(data, options, loop);
}

std::string FreshDirectory(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A run that crashes after step 3 and resumes from its checkpoint continues with
// exactly the losses and parameters of a run that never stopped: model,
// optimizer moments, schedule position, loader position and the dropout RNG all
// come back.
TEST(TrainerTest, ResumingFromACheckpointContinuesExactlyLikeAnUninterruptedRun) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  options.metrics_every = 1;
  options.dropout = 0.1;
  options.checkpoint_dir = FreshDirectory("resume");
  options.checkpoint_every = 3;
  TrainerLoopOptions loop;
  loop.checkpoint_keep = 10;
  const ReportedRun uninterrupted = RunOneRank(options, train, test, loop);
  ASSERT_EQ(uninterrupted.outcome.steps, 8);
  const CheckpointDirectory dir(options.checkpoint_dir);
  for (const int64_t step : {3, 6, 8}) {
    EXPECT_TRUE(std::filesystem::exists(dir.ModelPath(step))) << step;
    EXPECT_TRUE(std::filesystem::exists(dir.RankPath(step, 0))) << step;
  }
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(8));

  // The crash: the checkpoints after step 3 never became the latest.
  ASSERT_TRUE(dir.PublishLatest(3).ok());
  options.resume = true;
  const ReportedRun resumed = RunOneRank(options, train, test, loop);
  EXPECT_EQ(resumed.outcome.resumed_from, 3);
  EXPECT_EQ(resumed.outcome.steps, 8);
  EXPECT_EQ(resumed.outcome.train_images, 5 * 32);
  const std::map<int64_t, double>& losses = resumed.values.at("loss");
  ASSERT_EQ(losses.size(), 5u);
  EXPECT_EQ(losses.begin()->first, 4);
  for (const auto& [step, loss] : losses) {
    EXPECT_EQ(loss, uninterrupted.values.at("loss").at(step)) << "step " << step;
    EXPECT_EQ(resumed.values.at("lr").at(step), uninterrupted.values.at("lr").at(step));
  }
  EXPECT_EQ(resumed.outcome.param_hash, uninterrupted.outcome.param_hash);
  EXPECT_EQ(resumed.outcome.test_loss, uninterrupted.outcome.test_loss);
}

// Both ranks write and read their own state. (No dropout here: the ranks of this
// test are threads of one process and share LibTorch's generator, so their
// draws interleave unpredictably; the one-rank test covers the RNG state.)
// Checkpoints are written on a background thread: while the write of step 5
// is held back, training goes on to step 7 and `latest` still points at no
// checkpoint; once it is written it is published, and the run ends with its
// final checkpoint published.
TEST(TrainerTest, AnAsyncCheckpointIsPublishedOnlyOnceWrittenWhileTrainingGoesOn) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  options.checkpoint_every = 5;
  options.checkpoint_dir = FreshDirectory("async-checkpoint");
  RealClock clock;
  ProgressTracker progress(clock);
  TrainerLoopOptions loop;
  loop.checkpoint_keep = 10;
  loop.progress = &progress;
  int64_t step_reached = -1;
  absl::StatusOr<std::optional<int64_t>> latest_while_held = std::nullopt;
  loop.before_checkpoint_write = [&](int64_t step) {
    if (step != 5) return;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (progress.step() < 7 && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(1));
    step_reached = progress.step();
    latest_while_held = CheckpointDirectory(options.checkpoint_dir).LatestStep();
  };
  const absl::StatusOr<TrainingOutcome> outcome = TrainAlone(options, train, test, loop);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_GE(step_reached, 7) << "training waited for the checkpoint write";
  ASSERT_TRUE(latest_while_held.ok()) << latest_while_held.status();
  EXPECT_FALSE(latest_while_held->has_value())
      << "latest moved to " << **latest_while_held << " before the write was done";
  const CheckpointDirectory dir(options.checkpoint_dir);
  const absl::StatusOr<std::optional<int64_t>> latest = dir.LatestStep();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, 8);
  EXPECT_TRUE(std::filesystem::exists(dir.ModelPath(5)));

  // Written within the step instead: the same model.
  TrainerOptions sync = options;
  sync.checkpoint_async = false;
  sync.checkpoint_dir = FreshDirectory("sync-checkpoint");
  const absl::StatusOr<TrainingOutcome> synchronous = TrainAlone(sync, train, test);
  ASSERT_TRUE(synchronous.ok()) << synchronous.status();
  EXPECT_EQ(synchronous->param_hash, outcome->param_hash);
}

TEST(TrainerTest, TwoRanksResumeInSyncWithTheUninterruptedRun) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 6;
  options.batch_size = 16;
  options.optimizer = "sgd";
  options.checkpoint_dir = FreshDirectory("resume-two");
  options.checkpoint_every = 2;
  const std::vector<TrainingOutcome> uninterrupted = TrainTwoRanks(options, train, test);
  ASSERT_EQ(uninterrupted.size(), 2u);
  const CheckpointDirectory dir(options.checkpoint_dir);
  // The default keeps the newest two.
  EXPECT_FALSE(std::filesystem::exists(dir.StepDir(2)));
  EXPECT_TRUE(std::filesystem::exists(dir.RankPath(4, 1)));
  ASSERT_TRUE(dir.PublishLatest(4).ok());
  options.resume = true;
  const std::vector<TrainingOutcome> resumed = TrainTwoRanks(options, train, test);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].resumed_from, 4);
  EXPECT_EQ(resumed[1].resumed_from, 4);
  EXPECT_EQ(resumed[0].param_hash, uninterrupted[0].param_hash);
  EXPECT_EQ(resumed[1].param_hash, uninterrupted[1].param_hash);
}

// A search's trial (docs/search.md): each rung's job stops at its fraction of
// the run, checkpoints, and the next resumes it; the schedule is the whole
// run's throughout, so the trial promoted through every rung ends with exactly
// the parameters of one uninterrupted run (vit-micro, 2 Gloo ranks, AdamW).
TEST(TrainerTest, ATrialResumedThroughItsRungsEndsExactlyLikeTheUninterruptedRun) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 18;
  options.batch_size = 16;
  options.warmup_steps = 4;
  options.checkpoint_dir = FreshDirectory("trial-uninterrupted");
  const std::vector<TrainingOutcome> uninterrupted = TrainTwoRanks(options, train, test);
  ASSERT_EQ(uninterrupted.size(), 2u);
  ASSERT_EQ(uninterrupted[0].steps, 18);

  options.checkpoint_dir = FreshDirectory("trial-rungs");
  // Rungs of 2, 6 and 18 steps: eta 3, as ASHA's.
  const std::vector<std::pair<double, int64_t>> rungs = {
      {1.0 / 9.0, 2}, {1.0 / 3.0, 6}, {0.0, 18}};
  std::vector<TrainingOutcome> last;
  for (const auto& [fraction, steps] : rungs) {
    options.stop_fraction = fraction;
    last = TrainTwoRanks(options, train, test);
    ASSERT_EQ(last.size(), 2u);
    EXPECT_EQ(last[0].steps, steps) << "stop_fraction " << fraction;
    EXPECT_EQ(*CheckpointDirectory(options.checkpoint_dir).LatestStep(),
              std::optional<int64_t>(steps));
    options.resume = true;
  }
  EXPECT_EQ(last[0].resumed_from, 6);
  EXPECT_EQ(last[0].param_hash, uninterrupted[0].param_hash);
  EXPECT_EQ(last[1].param_hash, uninterrupted[1].param_hash);
  EXPECT_EQ(last[0].test_loss, uninterrupted[0].test_loss);
}

// Each rung's stopping checkpoint outlives the later rungs that train on into
// the trial's directory (and prune it to the newest two), so the model every
// rung scored can still be exported.
TEST(TrainerTest, EveryRungsStoppingCheckpointOutlivesTheLaterRungs) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 18;
  options.batch_size = 16;
  options.checkpoint_every = 2;
  options.checkpoint_dir = FreshDirectory("rung-checkpoints");
  const CheckpointDirectory dir(options.checkpoint_dir);
  for (const double fraction : {1.0 / 9.0, 1.0 / 3.0, 0.0}) {
    options.stop_fraction = fraction;
    ASSERT_TRUE(TrainAlone(options, train, test).ok()) << "stop_fraction " << fraction;
    options.resume = true;
  }
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(18));
  // The rungs stopped at steps 2 and 6; of the rest the newest two remain.
  for (const int64_t step : {2, 6, 16, 18}) {
    EXPECT_TRUE(std::filesystem::exists(dir.ModelPath(step))) << "step " << step;
  }
  for (const int64_t step : {4, 8, 14}) {
    EXPECT_FALSE(std::filesystem::exists(dir.StepDir(step))) << "step " << step;
  }
  EXPECT_TRUE(std::filesystem::exists(dir.KeepMarkerPath(6)));
  EXPECT_FALSE(std::filesystem::exists(dir.KeepMarkerPath(18)));
}

// Runs one rank on `data` and returns its outcome and every reported value.
ReportedRun RunOneRankOn(const TrainingData& data, const TrainerOptions& options,
                         const TrainerLoopOptions& loop) {
  ReportedRun run;
  LocalCommunicator communicator;
  FakeCoordinatorClient coordinator;
  auto reporter = MetricsReporter::Create(QuietReporting(), &coordinator);
  EXPECT_TRUE(reporter.ok());
  if (!reporter.ok()) return run;
  Trainer trainer(options, data, communicator, **reporter, loop);
  absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
  EXPECT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  if (outcome.ok()) run.outcome = *outcome;
  for (const MetricSample& point : coordinator.received()) {
    run.values[point.name][point.step] = point.value;
  }
  return run;
}

std::vector<int64_t> StepsOf(const std::map<int64_t, double>& values) {
  std::vector<int64_t> steps;
  for (const auto& [step, value] : values) steps.push_back(step);
  return steps;
}

// The held-out validation split is scored every eval_every steps and at the
// step the run stops (a rung's end here), and the test split at the end only.
TEST(TrainerTest, TheValidationSplitIsScoredEveryEvalEveryStepsAndWhereTheRunStops) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  SyntheticDatasetOptions held_out;
  held_out.size = 48;
  held_out.seed = 11;  // other images than the test split's
  held_out.split = Split::kTest;
  const ImageDataset val = *MakeSyntheticDataset(held_out);
  const InMemoryData data(train, test, "synthetic", &val);
  TrainerOptions options = SmallRun();
  options.max_steps = 12;
  options.eval_every = 3;
  options.stop_fraction = 0.5;
  options.checkpoint_dir = FreshDirectory("val-every");
  const ReportedRun run = RunOneRankOn(data, options);
  EXPECT_EQ(run.outcome.steps, 6);
  ASSERT_EQ(run.values.count("val_accuracy"), 1u);
  EXPECT_EQ(StepsOf(run.values.at("val_accuracy")), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(StepsOf(run.values.at("val_loss")), (std::vector<int64_t>{3, 6}));
  for (const auto& [step, accuracy] : run.values.at("val_accuracy")) {
    EXPECT_GE(accuracy, 0.0);
    EXPECT_LE(accuracy, 1.0);
  }
  EXPECT_NE(run.values.at("val_loss").at(6), run.values.at("test_loss").at(6))
      << "the validation figures are the test split's";
}

TEST(TrainerTest, EvalEveryWithoutAValidationSplitIsRefusedSayingHowToMakeOne) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.eval_every = 5;
  const absl::StatusOr<TrainingOutcome> outcome = TrainAlone(options, train, test);
  ASSERT_FALSE(outcome.ok());
  EXPECT_THAT(std::string(outcome.status().message()),
              ::testing::HasSubstr("trainer.val_fraction"));
}

TEST(TrainerTest, ResumeWithoutACheckpointYetStartsFresh) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 2;
  options.checkpoint_dir = FreshDirectory("fresh");
  options.resume = true;
  const ReportedRun run = RunOneRank(options, train, test);
  EXPECT_EQ(run.outcome.resumed_from, 0);
  EXPECT_EQ(run.outcome.steps, 2);
  EXPECT_EQ(*CheckpointDirectory(options.checkpoint_dir).LatestStep(),
            std::optional<int64_t>(2));
}

// The data position is a count of samples (data_position.h): a run resumed
// with another batch size and accumulation continues from the same sample of
// the same epoch, and only as many steps remain as that epoch's samples allow.
TEST(TrainerTest, ResumingWithAnotherBatchSizeContinuesFromTheSameSample) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 3;  // 3 x 32 = 96 samples of epoch 0
  options.epochs = 2;
  options.checkpoint_dir = FreshDirectory("rebatch");
  ASSERT_TRUE(TrainAlone(options, train, test).ok());
  options.resume = true;
  options.batch_size = 64;  // 128 samples per step now
  options.grad_accum = 2;
  options.max_steps = 0;
  absl::StatusOr<TrainingOutcome> resumed = TrainAlone(options, train, test);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from, 3);
  // (512 - 96) / 128 = 3 steps left in epoch 0, then 4 in epoch 1.
  EXPECT_EQ(resumed->steps, 3 + 3 + 4);
  EXPECT_EQ(resumed->train_images, (3 + 4) * 128);
}

// A checkpoint of one rank resumed by two, each with half the batch: the same
// global batches of the same samples in the same order, so the model ends
// where the uninterrupted one-rank run ends (up to summation order).
TEST(TrainerTest, AOneRankCheckpointResumesOnTwoRanksLikeTheUninterruptedRun) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(200, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 8;
  options.batch_size = 16;
  options.checkpoint_dir = FreshDirectory("one-to-two");
  options.checkpoint_every = 3;
  TrainerLoopOptions loop;
  loop.checkpoint_keep = 10;
  const absl::StatusOr<TrainingOutcome> uninterrupted =
      TrainAlone(options, train, test, loop);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  ASSERT_TRUE(CheckpointDirectory(options.checkpoint_dir).PublishLatest(3).ok());
  options.resume = true;
  options.batch_size = 8;
  const std::vector<TrainingOutcome> resumed = TrainTwoRanks(options, train, test, loop);
  ASSERT_EQ(resumed.size(), 2u);
  for (const TrainingOutcome& rank : resumed) {
    EXPECT_EQ(rank.resumed_from, 3);
    EXPECT_EQ(rank.resumed_world_size, 1);
    EXPECT_EQ(rank.steps, 8);
    EXPECT_EQ(rank.train_images, 5 * 8);
  }
  EXPECT_EQ(resumed[0].param_hash, resumed[1].param_hash);
  EXPECT_NEAR(resumed[0].test_loss, uninterrupted->test_loss, 1e-4);
  EXPECT_NEAR(resumed[0].test_accuracy, uninterrupted->test_accuracy, 0.011);
}

TEST(TrainerTest, SgdWithMomentumLearns) {
  const ImageDataset train = Synthetic(2048, Split::kTrain);
  const ImageDataset test = Synthetic(512, Split::kTest);
  TrainerOptions options = SmallRun();
  options.optimizer = "sgd";
  options.lr = 0.05;
  options.weight_decay = 1e-4;
  const ReportedRun run = RunOneRank(options, train, test);
  EXPECT_GT(run.outcome.test_accuracy, 0.4);  // chance is 0.1
}

TEST(TrainerTest, WarmupStepsSetTheRampOfTheReportedLearningRate) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions options = SmallRun();
  options.max_steps = 6;
  options.metrics_every = 1;
  options.warmup_steps = 4;
  const ReportedRun run = RunOneRank(options, train, test);
  const std::map<int64_t, double>& lr = run.values.at("lr");
  EXPECT_DOUBLE_EQ(lr.at(1), options.lr * 0.25);
  EXPECT_DOUBLE_EQ(lr.at(4), options.lr);
  EXPECT_LT(lr.at(6), options.lr);
}

// Each of these settings must reach the computation: changing it changes the
// trained parameters.
TEST(TrainerTest, DropoutLabelSmoothingAndClippingChangeTheTrainedModel) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  TrainerOptions base = SmallRun();
  base.max_steps = 3;
  const std::string plain = RunOneRank(base, train, test).outcome.param_hash;
  TrainerOptions dropout = base;
  dropout.dropout = 0.2;
  TrainerOptions smoothing = base;
  smoothing.label_smoothing = 0.2;
  TrainerOptions clipped = base;
  clipped.clip_grad_norm = 1e-3;
  TrainerOptions loose_clip = base;
  loose_clip.clip_grad_norm = 1e6;
  EXPECT_NE(RunOneRank(dropout, train, test).outcome.param_hash, plain);
  EXPECT_NE(RunOneRank(smoothing, train, test).outcome.param_hash, plain);
  EXPECT_NE(RunOneRank(clipped, train, test).outcome.param_hash, plain);
  // A bound the gradients never reach leaves them alone.
  EXPECT_EQ(RunOneRank(loose_clip, train, test).outcome.param_hash, plain);
}

TEST(TrainerTest, MixedPrecisionOnTheCpuIsRejectedUpFront) {
  const ImageDataset train = Synthetic(256, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  for (const char* precision : {"bf16", "fp16"}) {
    TrainerOptions options = SmallRun();
    options.device = "cpu";
    options.precision = precision;
    LocalCommunicator communicator;
    auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
    ASSERT_TRUE(reporter.ok());
    Trainer trainer(options, train, test, communicator, **reporter);
    const absl::Status status = trainer.Run().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << precision;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("CUDA")) << precision;
  }
}

TEST(ResolveDeviceTest, CpuIsAlwaysAvailableAndAutoFallsBackToIt) {
  TrainerOptions options;
  options.device = "cpu";
  absl::StatusOr<DevicePlacement> cpu = ResolveDevice(options, 3);
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->name(), "cpu");
  options.device = "auto";
  absl::StatusOr<DevicePlacement> automatic = ResolveDevice(options, 0);
  ASSERT_TRUE(automatic.ok());
  if (automatic->cuda) GTEST_SKIP() << "a CUDA device is visible; auto picked it";
  EXPECT_EQ(automatic->name(), "cpu");
  options.device = "cuda";
  EXPECT_EQ(ResolveDevice(options, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResolveDeviceTest, EachLocalRankGetsItsOwnDeviceAndExtraRanksFail) {
  // Several visible devices: one per local rank, never shared by wrapping round.
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    absl::StatusOr<int> device = CudaDeviceForLocalRank(local_rank, 4);
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(*device, local_rank);
  }
  const absl::Status extra = CudaDeviceForLocalRank(4, 4).status();
  EXPECT_EQ(extra.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(extra.message()), ::testing::HasSubstr("local rank 4"));
  EXPECT_THAT(std::string(extra.message()),
              ::testing::HasSubstr("4 devices are visible"));
  EXPECT_EQ(CudaDeviceForLocalRank(-1, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // One visible device (the launcher's CUDA_VISIBLE_DEVICES per rank): device 0.
  EXPECT_EQ(CudaDeviceForLocalRank(0, 1).value_or(-1), 0);
  EXPECT_EQ(CudaDeviceForLocalRank(3, 1).value_or(-1), 0);
  EXPECT_EQ(CudaDeviceForLocalRank(0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResolveDeviceTest, MakingACpuPlacementCurrentTouchesNoDevice) {
  DevicePlacement cpu;
  EXPECT_TRUE(MakePlacementCurrent(cpu).ok());
}

// A CPU step's batches and activations (vit-micro's 64-image batch alone is
// 200 KB) must be recycled in the heap, not mapped afresh every step.
TEST(ConfigureHostAllocatorTest, BatchSizedBuffersComeFromTheHeapNotFreshMappings) {
#ifndef __GLIBC__
  GTEST_SKIP() << "the allocator settings are glibc's";
#else
  ASSERT_TRUE(ConfigureHostAllocator()) << "glibc refused a setting";
  const size_t mapped_before = mallinfo2().hblks;
  std::vector<void*> blocks;
  for (const size_t bytes :
       {size_t{200} << 10, size_t{1} << 20, size_t{8} << 20, size_t{30} << 20}) {
    blocks.push_back(malloc(bytes));
    ASSERT_NE(blocks.back(), nullptr);
    static_cast<volatile char*>(blocks.back())[bytes - 1] = 1;
  }
  const size_t mapped_after = mallinfo2().hblks;
  for (void* block : blocks) free(block);
  EXPECT_EQ(mapped_after, mapped_before) << "blocks of 200 KiB to 30 MiB were mmap'ed";
#endif
}

TEST(ScheduledLearningRateTest, WarmsUpLinearlyThenDecaysToTheFloor) {
  EXPECT_EQ(ResolveWarmupSteps(-1, 100, 0.1), 10);
  EXPECT_EQ(ResolveWarmupSteps(-1, 101, 0.05), 6);
  EXPECT_EQ(ResolveWarmupSteps(7, 100, 0.1), 7);
  EXPECT_EQ(ResolveWarmupSteps(0, 100, 0.1), 0);
  const int64_t warmup = 10;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 0, 100, warmup, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 4, 100, warmup, 0.1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 9, 100, warmup, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, 10, 100, warmup, 0.1), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(1.0, 55, 100, warmup, 0.1), 0.55, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(1.0, 100, 100, warmup, 0.1), 0.1, 1e-12);
  for (int64_t step = 11; step < 100; ++step) {
    EXPECT_LE(ScheduledLearningRate(1.0, step, 100, warmup, 0.1),
              ScheduledLearningRate(1.0, step - 1, 100, warmup, 0.1));
  }
  // No warmup: the peak from the first step.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(2.0, 0, 100, 0, 0.0), 2.0);
}

}  // namespace
}  // namespace tessera::trainer
