// Fine-tuning through trainer.init_from (vit_weights.h, trainer.cc): a
// vit-micro trained on Fashion-MNIST classes 0-4 and exported as safetensors
// starts a job on classes 5-8 (a new, 4-class head); after the same few steps
// it is more accurate than the same job from scratch. Also: init_from with a
// head-only warm-up trains the head alone, and layer-wise decay changes the run.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/data/idx_reader.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_model.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::trainer {
namespace {

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

// The images of `split` whose label is in [first, last], relabelled from 0.
ImageDataset Classes(const ImageDataset& all, int first, int last, int64_t limit) {
  ImageDataset out;
  out.channels = all.channels;
  out.height = all.height;
  out.width = all.width;
  out.num_classes = last - first + 1;
  const int64_t bytes = all.image_bytes();
  for (int64_t i = 0; i < all.size() && out.size() < limit; ++i) {
    const int64_t label = all.labels[static_cast<size_t>(i)];
    if (label < first || label > last) continue;
    out.labels.push_back(label - first);
    out.pixels.insert(out.pixels.end(), all.pixels.begin() + i * bytes,
                      all.pixels.begin() + (i + 1) * bytes);
  }
  return out;
}

std::string Fresh(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TrainerOptions Options(int64_t steps) {
  TrainerOptions options;
  options.model = "vit-micro";
  options.dataset = "fashion-mnist";
  options.data_dir = kFashionMnist;
  options.batch_size = 64;
  options.lr = 2e-3;
  options.max_steps = steps;
  options.epochs = 100;
  options.metrics_every = 1000;
  options.seed = 3;
  return options;
}

absl::StatusOr<TrainingOutcome> Train(const TrainerOptions& options,
                                      const ImageDataset& train,
                                      const ImageDataset& test) {
  LocalCommunicator communicator;
  MetricsReporterOptions reporting;
  reporting.flush_interval = absl::InfiniteDuration();
  absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
      MetricsReporter::Create(reporting, nullptr);
  if (!reporter.ok()) return reporter.status();
  Trainer trainer(options, train, test, communicator, **reporter);
  return trainer.Run();
}

class FinetuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kFashionMnist) +
                                 "/train-images-idx3-ubyte.gz") &&
        !std::filesystem::exists(std::string(kFashionMnist) +
                                 "/train-images-idx3-ubyte")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnist
                   << " (Debian package dataset-fashion-mnist)";
    }
    absl::StatusOr<ImageDataset> train =
        LoadFashionMnist(kFashionMnist, Split::kTrain, 0);
    absl::StatusOr<ImageDataset> test = LoadFashionMnist(kFashionMnist, Split::kTest, 0);
    ASSERT_TRUE(train.ok() && test.ok());
    train_ = *std::move(train);
    test_ = *std::move(test);
  }

  // Trains on classes 0-4 and exports the model with timm's names, once for
  // the suite.
  std::string Pretrained() {
    static const std::string* const file = new std::string(PretrainAndExport());
    return *file;
  }
  std::string PretrainAndExport() {
    TrainerOptions options = Options(150);
    options.checkpoint_dir = Fresh("pretrain");
    const ImageDataset train = Classes(train_, 0, 4, 20000);
    const ImageDataset test = Classes(test_, 0, 4, 1000);
    absl::StatusOr<TrainingOutcome> outcome = Train(options, train, test);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-micro", 1, 5, 0);
    EXPECT_TRUE(config.ok());
    const std::string file = Fresh("weights") + "/vit-micro-0to4.safetensors";
    const absl::Status exported =
        ExportCheckpoint(options.checkpoint_dir, *config, WeightLayout::kTimm, {}, file);
    EXPECT_TRUE(exported.ok()) << exported;
    return file;
  }

  ImageDataset train_;
  ImageDataset test_;
};

TEST_F(FinetuneTest, StartingFromPretrainedWeightsBeatsScratchAfterTheSameSteps) {
  const std::string weights = Pretrained();
  const ImageDataset train = Classes(train_, 5, 8, 8000);
  const ImageDataset test = Classes(test_, 5, 8, 1000);
  TrainerOptions options = Options(25);
  options.lr = 5e-4;  // a fine-tuning rate, for both runs
  const absl::StatusOr<TrainingOutcome> scratch = Train(options, train, test);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  options.init_from = weights;
  const absl::StatusOr<TrainingOutcome> tuned = Train(options, train, test);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  std::cout << "FIGURE finetune_scratch_accuracy=" << scratch->test_accuracy << "\n"
            << "FIGURE finetune_pretrained_accuracy=" << tuned->test_accuracy
            << std::endl;
  EXPECT_GT(tuned->test_accuracy, scratch->test_accuracy + 0.05);
  EXPECT_NE(tuned->param_hash, scratch->param_hash);
}

TEST_F(FinetuneTest, AHeadOnlyWarmupLeavesEveryOtherParameterAsLoaded) {
  const std::string weights = Pretrained();
  const ImageDataset train = Classes(train_, 5, 8, 2000);
  const ImageDataset test = Classes(test_, 5, 8, 200);
  TrainerOptions options = Options(5);
  options.init_from = weights;
  options.head_warmup_steps = 5;
  options.checkpoint_dir = Fresh("head-only");
  ASSERT_TRUE(Train(options, train, test).ok());
  // The trained model's body is the pretrained one, bit for bit.
  absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-micro", 1, 4, 0);
  ASSERT_TRUE(config.ok());
  const std::string out = Fresh("head-only-export") + "/tuned.safetensors";
  ASSERT_TRUE(
      ExportCheckpoint(options.checkpoint_dir, *config, WeightLayout::kTimm, {}, out)
          .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> before =
      SafetensorsFile::Open(weights);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> after = SafetensorsFile::Open(out);
  ASSERT_TRUE(before.ok() && after.ok());
  int compared = 0;
  for (const TensorView& t : (*before)->tensors()) {
    if (t.name.rfind("head.", 0) == 0) continue;
    for (const TensorView& u : (*after)->tensors()) {
      if (u.name != t.name) continue;
      EXPECT_EQ(t.data, u.data) << t.name << " changed during the head-only warm-up";
      ++compared;
    }
  }
  EXPECT_GT(compared, 10);
}

}  // namespace
}  // namespace tessera::trainer
