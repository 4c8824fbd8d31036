// The evaluation-only run (evaluation.h) in process: against the training
// loop's own final evaluation, against torchvision on an image folder, and
// its refusals before any work.
#include "worker/trainer/run/evaluation.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/trainer/torchvision_reference.h"
#include "worker/trainer/data/image_data.h"
#include "worker/trainer/data/image_preprocessor.h"
#include "worker/trainer/data/synthetic_dataset.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string FreshDirectory(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

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
  options.max_steps = 24;
  options.metrics_every = 8;
  options.epochs = 10;
  return options;
}

MetricsReporterOptions QuietReporting() {
  MetricsReporterOptions options;
  options.flush_interval = absl::InfiniteDuration();
  return options;
}

absl::StatusOr<EvalReport> EvaluateAlone(const TrainerOptions& options,
                                         const TrainingData& data) {
  LocalCommunicator communicator;
  absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
      MetricsReporter::Create(QuietReporting(), nullptr);
  if (!reporter.ok()) return reporter.status();
  return RunEvaluation(options, data, communicator, **reporter, TrainerLoopOptions{});
}

// A vit-micro model for the synthetic data, saved as safetensors with these
// class names (and as many classes).
std::string SaveMicroModel(const std::string& dir, const std::vector<std::string>& names,
                           const std::string& model = "vit-micro") {
  ViTConfig config =
      *ResolveViTConfig(model, 1, static_cast<int>(names.size()), /*image_size=*/28);
  torch::manual_seed(5);
  VisionTransformer vit(config);
  const std::string path = dir + "/" + model + ".safetensors";
  EXPECT_TRUE(ExportSafetensors(*vit, WeightLayout::kTessera, names, path).ok());
  return path;
}

std::vector<std::string> Digits() {
  std::vector<std::string> names;
  for (int c = 0; c < 10; ++c) names.push_back(absl::StrCat(c));
  return names;
}

TEST(EvaluationTest, CheckpointEvaluatesToTheTrainingRunsFinalTestAccuracy) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(200, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  TrainerOptions options = SmallRun();
  options.checkpoint_dir = FreshDirectory("eval-checkpoint");
  LocalCommunicator communicator;
  auto reporter = MetricsReporter::Create(QuietReporting(), nullptr);
  ASSERT_TRUE(reporter.ok());
  absl::StatusOr<TrainingOutcome> trained =
      Trainer(options, data, communicator, **reporter).Run();
  ASSERT_TRUE(trained.ok()) << trained.status();

  TrainerOptions eval = options;
  eval.eval_only = true;
  eval.resume = true;
  eval.lr = 0;
  const absl::StatusOr<EvalReport> report = EvaluateAlone(eval, data);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->step, 24);
  EXPECT_EQ(report->samples, 200);
  EXPECT_DOUBLE_EQ(report->top1, trained->test_accuracy);
  EXPECT_NEAR(report->loss, trained->test_loss, 1e-5);
  EXPECT_GE(report->top5, report->top1);
  // The per-class figures add up to the totals.
  ASSERT_EQ(report->confusion.size(), 100u);
  EXPECT_EQ(std::accumulate(report->confusion.begin(), report->confusion.end(), 0LL),
            200);
  double correct = 0;
  for (int c = 0; c < 10; ++c) {
    correct += report->class_accuracy[c] * static_cast<double>(report->class_samples[c]);
    EXPECT_EQ(report->confusion[c * 10 + c],
              std::llround(report->class_accuracy[c] * report->class_samples[c]));
  }
  EXPECT_NEAR(correct / 200, report->top1, 1e-12);
}

TEST(EvaluationTest, MissingCheckpointFailsNamingTheDirectory) {
  const ImageDataset train = Synthetic(64, Split::kTrain);
  const ImageDataset test = Synthetic(32, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  TrainerOptions options = SmallRun();
  options.eval_only = true;
  options.resume = true;
  options.checkpoint_dir = FreshDirectory("eval-empty-checkpoints");
  absl::StatusOr<EvalReport> report = EvaluateAlone(options, data);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(report.status().message(), HasSubstr("no checkpoint in"));
  EXPECT_THAT(report.status().message(), HasSubstr(options.checkpoint_dir));

  options.eval_step = 40;
  report = EvaluateAlone(options, data);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(report.status().message(), HasSubstr("no checkpoint of step 40"));
}

TEST(EvaluationTest, WeightsWithAnotherClassMappingFailNamingTheClass) {
  const ImageDataset train = Synthetic(64, Split::kTrain);
  const ImageDataset test = Synthetic(32, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  std::vector<std::string> names = Digits();
  names[7] = "seven";
  TrainerOptions options = SmallRun();
  options.eval_only = true;
  options.init_from = SaveMicroModel(FreshDirectory("eval-mapping"), names);
  const absl::StatusOr<EvalReport> report = EvaluateAlone(options, data);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report.status().message(),
              HasSubstr("class 7 is 'seven' in the weights and '7' in the data"));
}

TEST(EvaluationTest, WeightsOfAnotherModelFailNamingWhatDiffers) {
  const ImageDataset train = Synthetic(64, Split::kTrain);
  const ImageDataset test = Synthetic(32, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  TrainerOptions options = SmallRun();
  options.eval_only = true;
  options.image_size = 28;
  options.model = "vit-cifar-tiny";
  options.init_from = SaveMicroModel(FreshDirectory("eval-model"), Digits());
  const absl::StatusOr<EvalReport> report = EvaluateAlone(options, data);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(),
              HasSubstr("does not fit --model vit-cifar-tiny"));
  // vit-micro has 4 blocks of width 64, vit-cifar-tiny 6 of width 192.
  EXPECT_THAT(
      std::string(report.status().message()),
      HasSubstr("the file has 4 encoder blocks (tessera names); the model has 6"));
}

TEST(EvaluationTest, AHeadForAnotherClassCountFailsInsteadOfEvaluatingNoise) {
  const ImageDataset train = Synthetic(64, Split::kTrain);
  const ImageDataset test = Synthetic(32, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  TrainerOptions options = SmallRun();
  options.eval_only = true;
  options.init_from =
      SaveMicroModel(FreshDirectory("eval-head"), {"a", "b", "c", "d", "e"});
  const absl::StatusOr<EvalReport> report = EvaluateAlone(options, data);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("head.weight"));
  EXPECT_THAT(report.status().message(), HasSubstr("10 classes"));
}

TEST(EvaluationTest, InMemoryImagesAreResizedWithTheJobsInterpolation) {
  const ImageDataset train = Synthetic(64, Split::kTrain);
  const ImageDataset test = Synthetic(48, Split::kTest);
  const InMemoryData data(train, test, "synthetic");
  torch::manual_seed(5);
  VisionTransformer model(*ResolveViTConfig("vit-micro", 1, 10, /*image_size=*/32));
  {
    // Every parameter random (the head starts at zero): the logits, and so
    // the loss, follow the pixels.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
  }
  model->eval();
  const std::string path = FreshDirectory("eval-resize") + "/vit-micro.safetensors";
  ASSERT_TRUE(ExportSafetensors(*model, WeightLayout::kTessera, Digits(), path).ok());
  const torch::Tensor images = torch::from_blob(
      const_cast<uint8_t*>(test.pixels.data()),
      {test.size(), test.channels, test.height, test.width}, torch::kByte);
  const torch::Tensor labels = torch::tensor(test.labels);
  TrainerOptions options = SmallRun();
  options.eval_only = true;
  options.init_from = path;
  options.image_size = 32;  // the 28 px images are resized
  std::vector<double> losses;
  for (const auto& [name, interpolation] :
       {std::pair{"bilinear", data::Interpolation::kBilinear},
        std::pair{"bicubic", data::Interpolation::kBicubic}}) {
    SCOPED_TRACE(name);
    options.interpolation = name;
    const absl::StatusOr<EvalReport> report = EvaluateAlone(options, data);
    ASSERT_TRUE(report.ok()) << report.status();
    torch::NoGradGuard no_grad;
    const torch::Tensor logits =
        model->forward(ImagePreprocessor(data.stats(), 32, interpolation)(images));
    EXPECT_NEAR(report->loss, torch::cross_entropy_loss(logits, labels).item<double>(),
                1e-5);
    losses.push_back(report->loss);
  }
  std::cout << "loss: bilinear " << losses[0] << ", bicubic " << losses[1] << std::endl;
  EXPECT_GT(std::abs(losses[0] - losses[1]), 1e-3) << "the resizes differ";
}

TEST(EvaluationTest, EvalSplitNamesTheHeldOutOrTheTrainingSplit) {
  EXPECT_EQ(*EvalSplitOf("test"), Split::kTest);
  EXPECT_EQ(*EvalSplitOf("val"), Split::kVal);
  EXPECT_EQ(*EvalSplitOf("train"), Split::kTrain);
  EXPECT_FALSE(EvalSplitOf("holdout").ok());
}

TEST(EvaluationTorchvisionTest, TorchvisionModelEvaluatesToTorchvisionsOwnAccuracy) {
  if (std::getenv("TESSERA_REQUIRE_TORCHVISION") != nullptr) {
    ASSERT_TRUE(torchvision_reference::HaveTorchvision())
        << "no torch and torchvision, and TESSERA_REQUIRE_TORCHVISION is set";
  }
  if (!torchvision_reference::HaveTorchvision()) {
    GTEST_SKIP() << torchvision_reference::kPython
                 << " with torch and torchvision is not installed "
                 << "(Debian: python3-torchvision)";
  }
  const std::string dir = FreshDirectory("eval-torchvision");
  ASSERT_TRUE(torchvision_reference::RunPythonScript(
      dir, "folder_reference.py",
      absl::StrCat(torchvision_reference::kSafetensorsPython,
                   torchvision_reference::kImageFolderScript),
      // A faint tint: about 72% top-1, so that a sample decided otherwise shows.
      dir + " 8"));
  const nlohmann::json reference =
      nlohmann::json::parse(std::ifstream(dir + "/reference.json"));

  ImageDataOptions opening;
  opening.kind = "imagefolder";
  opening.root = dir + "/data";
  opening.crop_fraction = 1.0;  // 32 px images for a 32 px model: no resampling
  absl::StatusOr<std::unique_ptr<TrainingData>> data = OpenImageData(opening);
  ASSERT_TRUE(data.ok()) << data.status();
  TrainerOptions options;
  options.dataset = "imagefolder";
  options.model = "vit-micro";
  options.image_size = 32;
  options.eval_only = true;
  options.eval_split = "val";
  options.init_from = dir + "/model.safetensors";
  options.init_names = "torchvision";
  const absl::StatusOr<EvalReport> report = EvaluateAlone(options, **data);
  ASSERT_TRUE(report.ok()) << report.status();
  std::cout << FormatEvalReport(*report);
  EXPECT_EQ(report->samples, reference["samples"].get<int64_t>());
  EXPECT_DOUBLE_EQ(report->top1, reference["top1"].get<double>());
  EXPECT_NEAR(report->loss, reference["loss"].get<double>(), 1e-4);
  EXPECT_THAT(report->class_names, ::testing::ElementsAre("ant", "bee", "cat"));
  for (int c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(report->class_accuracy[c],
                     reference["class_accuracy"][c].get<double>());
  }

  // The evaluation crop (0.875: 32 px from 36) with a bicubic resize: the
  // image pipeline's region decode and resize give torchvision's figures.
  opening.crop_fraction = 0.875;
  opening.interpolation = data::Interpolation::kBicubic;
  absl::StatusOr<std::unique_ptr<TrainingData>> resized = OpenImageData(opening);
  ASSERT_TRUE(resized.ok()) << resized.status();
  const absl::StatusOr<EvalReport> bicubic = EvaluateAlone(options, **resized);
  ASSERT_TRUE(bicubic.ok()) << bicubic.status();
  EXPECT_DOUBLE_EQ(bicubic->top1, reference["bicubic_crop"]["top1"].get<double>());
  EXPECT_NEAR(bicubic->loss, reference["bicubic_crop"]["loss"].get<double>(), 1e-4);
  std::cout << "bicubic crop 0.875: top1 " << bicubic->top1 << " loss " << bicubic->loss
            << " (torchvision " << reference["bicubic_crop"]["top1"].get<double>() << ", "
            << reference["bicubic_crop"]["loss"].get<double>() << ")" << std::endl;
}

}  // namespace
}  // namespace tessera::trainer
