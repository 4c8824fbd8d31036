// Training's evaluation on the test split (run/test_evaluation.h), in a world
// of one: the accuracy and mean loss over every sample, in batches.
#include "worker/trainer/run/test_evaluation.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "worker/trainer/data/synthetic_dataset.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {
namespace {

ImageDataset Synthetic(int64_t size, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = 4;
  options.split = split;
  return *MakeSyntheticDataset(options);
}

struct Fixture {
  ImageDataset train = Synthetic(16, Split::kTrain);
  ImageDataset test = Synthetic(23, Split::kTest);
  InMemoryData data{train, test, "synthetic"};
  DistributedSampler sampler = *DistributedSampler::Create(
      DistributedSamplerOptions{.dataset_size = 16, .rank = 0, .world_size = 1});
  EpochPlan epochs = *EpochPlan::Create(
      EpochPlanOptions{.epoch_size = 16, .world_size = 1, .batch_size = 8, .accum = 1});
  std::unique_ptr<TrainingFeeds> feeds = TrainingFeeds::Create(
      data, TrainerOptions{},
      FeedPlan{.sampler = &sampler, .epochs = &epochs, .micro_batches = 1});
  VisionTransformer model = [] {
    torch::manual_seed(2);
    return VisionTransformer(*ResolveViTConfig("vit-micro", 1, 10));
  }();
};

TEST(TestEvaluationTest, ScoresEverySampleOnceAcrossItsBatches) {
  Fixture f;
  std::vector<int64_t> indices(23);
  std::iota(indices.begin(), indices.end(), 0);
  LocalCommunicator communicator;
  FakeClock clock;
  ProgressTracker progress(clock);
  PhaseReporter phases(&progress);
  phases.Report(RankPhase::kEval);
  const absl::StatusOr<TestEvaluation> evaluation =
      EvaluateTestSplit(f.model, indices, *f.feeds, communicator, phases,
                        TestEvaluationOptions{.batch_size = 5});
  ASSERT_TRUE(evaluation.ok()) << evaluation.status();
  EXPECT_TRUE(f.model->is_training());
  EXPECT_EQ(progress.phase(), RankPhase::kEval);

  // The same figures counted here, batch by batch.
  torch::NoGradGuard no_grad;
  f.model->eval();
  double correct = 0;
  double loss_sum = 0;
  for (int64_t begin = 0; begin < 23; begin += 5) {
    const Batch batch = f.feeds->test().ToDevice(*f.feeds->test_loader().Load(
        indices, begin, std::min<int64_t>(23, begin + 5), 0));
    const torch::Tensor logits = f.model->forward(batch.images);
    correct += logits.argmax(1).eq(batch.labels).sum().item<double>();
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, batch.labels,
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
  }
  EXPECT_DOUBLE_EQ(evaluation->accuracy, correct / 23.0);
  const double loss = loss_sum / 23.0;
  EXPECT_NEAR(evaluation->loss, loss, 1e-5);
}

TEST(TestEvaluationTest, AnEmptySplitHasNoAccuracy) {
  Fixture f;
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  EXPECT_EQ(
      EvaluateTestSplit(f.model, {}, *f.feeds, communicator, phases, {}).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

// What a HeldOutEvaluation scored, and a reporter to read what it reported.
struct Scored {
  Scored()
      : reporter(*MetricsReporter::Create(
            MetricsReporterOptions{.flush_interval = absl::InfiniteDuration()},
            &coordinator)) {}
  HeldOutEvaluation::Score Score() {
    return [this](Split split) -> absl::StatusOr<TestEvaluation> {
      splits.push_back(split);
      return TestEvaluation{.accuracy = split == Split::kVal ? 0.5 : 0.75, .loss = 1.0};
    };
  }
  std::map<std::string, std::vector<int64_t>> Reported() {
    EXPECT_TRUE(reporter->Flush(absl::Seconds(10)).ok());
    std::map<std::string, std::vector<int64_t>> steps;
    for (const MetricSample& point : coordinator.received()) {
      steps[point.name].push_back(point.step);
    }
    return steps;
  }
  std::vector<Split> splits;
  testing::FakeCoordinatorClient coordinator;
  std::unique_ptr<MetricsReporter> reporter;
};

TEST(HeldOutEvaluationTest, ReportsTheTestSplitAndRemembersIt) {
  Scored scored;
  HeldOutEvaluation held_out(scored.Score(), *scored.reporter, {});
  EXPECT_FALSE(held_out.tested_at().has_value());
  ASSERT_TRUE(held_out.Test(8).ok());
  EXPECT_EQ(held_out.tested_at(), std::optional<int64_t>(8));
  EXPECT_EQ(held_out.last_test().accuracy, 0.75);
  // No validation split: never due.
  ASSERT_TRUE(held_out.ValidateIfDue(8, 8).ok());
  EXPECT_EQ(scored.splits, (std::vector<Split>{Split::kTest}));
  auto reported = scored.Reported();
  EXPECT_EQ(reported["test_accuracy"], (std::vector<int64_t>{8}));
  EXPECT_EQ(reported["test_loss"], (std::vector<int64_t>{8}));
  EXPECT_EQ(reported.count("val_accuracy"), 0u);
}

TEST(HeldOutEvaluationTest, ValidatesEveryKStepsAndAtTheStop) {
  Scored scored;
  HeldOutEvaluation held_out(scored.Score(), *scored.reporter,
                             {.has_val = true, .eval_every = 3});
  for (int64_t step = 1; step <= 7; ++step) {
    ASSERT_TRUE(held_out.ValidateIfDue(step, 7).ok());
  }
  EXPECT_EQ(scored.Reported()["val_accuracy"], (std::vector<int64_t>{3, 6, 7}));
}

TEST(HeldOutEvaluationTest, ATestSplitThatIsTheValidationSplitIsScoredOnce) {
  Scored scored;
  HeldOutEvaluation held_out(scored.Score(), *scored.reporter,
                             {.has_val = true, .test_is_val = true, .eval_every = 4});
  ASSERT_TRUE(held_out.Test(4).ok());
  ASSERT_TRUE(held_out.ValidateIfDue(4, 10).ok());  // scored by the test
  ASSERT_TRUE(held_out.ValidateIfDue(8, 10).ok());
  EXPECT_EQ(scored.splits, (std::vector<Split>{Split::kTest, Split::kVal}));
  auto reported = scored.Reported();
  EXPECT_EQ(reported["val_accuracy"], (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(reported["test_accuracy"], (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace tessera::trainer
