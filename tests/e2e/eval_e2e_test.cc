// Evaluation as a job, end to end: a real tessera-coordinator and
// tessera-worker, a training job that checkpoints, then `tessctl eval JOB`,
// which submits a job of kind eval that runs on the worker like any other and
// reports the same top-1 as the training job's final evaluation, with its
// per-class figures and confusion matrix in `tessctl status -o json`. And a
// torchvision model on its own 32 px images, which scores torchvision's own
// top-1 exactly through `tessctl eval --from` once the evaluation takes its
// preprocessing: from `--set trainer.crop_fraction=1`, or from the file's
// metadata.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/test_util.h"
#include "tests/worker/trainer/torchvision_reference.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class EvalE2eTest : public ClusterTest {
 protected:
  // Runs `tessctl ARGS` that submit a job, waits for that job and returns it.
  v1::Job SubmitAndWait(const std::vector<std::string>& args) {
    const Ran submitted = Tessctl(args);
    EXPECT_EQ(submitted.code, 0) << submitted.out;
    const std::vector<std::string> lines =
        absl::StrSplit(submitted.out, '\n', absl::SkipWhitespace());
    int64_t id = 0;
    if (lines.empty() || !absl::SimpleAtoi(lines.back(), &id)) {
      ADD_FAILURE() << "no job id in: " << submitted.out;
      return v1::Job();
    }
    return WaitForEnd(id, absl::Minutes(3));
  }

  // A short synthetic run that checkpoints at its end.
  std::string TrainingSpec() {
    return absl::StrCat(R"(name: e2e-train
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: 8
  batch_size: 32
  train_subset: 512
  test_subset: 128
  metrics_every: 4
  seed: 7
  device: cpu
  checkpoint_dir: )",
                        dir_.File("ckpt"), "\n");
  }
};

TEST_F(EvalE2eTest, TessctlEvalRunsOnAWorkerAndRepeatsTheFinalTopOne) {
  StartCoordinator();
  StartWorker("w1", port_);
  WaitForWorkers(1);
  const int64_t trained_id = Submit(TrainingSpec());
  const v1::Job trained = WaitForEnd(trained_id, absl::Minutes(3));
  ASSERT_EQ(trained.state(), v1::JOB_STATE_SUCCEEDED) << trained.reason() << DumpLogs();
  ASSERT_TRUE(trained.ranks(0).has_result());

  const Ran submitted = Tessctl({"eval", absl::StrCat(trained_id), "--split", "test"});
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  ASSERT_THAT(submitted.out, HasSubstr("submitted eval job"));
  const std::vector<std::string> lines =
      absl::StrSplit(submitted.out, '\n', absl::SkipWhitespace());
  int64_t eval_id = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lines.back(), &eval_id)) << submitted.out;

  const v1::Job eval = WaitForEnd(eval_id, absl::Minutes(3));
  ASSERT_EQ(eval.state(), v1::JOB_STATE_SUCCEEDED) << eval.reason() << DumpLogs();
  EXPECT_EQ(eval.spec().kind(), "eval");
  EXPECT_EQ(eval.spec().eval_of(), trained_id);
  EXPECT_EQ(eval.owner(), trained.owner());
  ASSERT_TRUE(eval.ranks(0).has_eval()) << DumpLogs();
  const v1::EvalResult& result = eval.ranks(0).eval();
  EXPECT_EQ(result.step(), 8);
  EXPECT_EQ(result.samples(), 128);
  EXPECT_DOUBLE_EQ(result.top1(), trained.ranks(0).test_accuracy());
  EXPECT_EQ(result.class_accuracy_size(), 10);
  EXPECT_EQ(result.confusion_size(), 100);

  const Ran status = Tessctl({"status", absl::StrCat(eval_id), "-o", "json"});
  ASSERT_EQ(status.code, 0) << status.out;
  for (const char* key : {"\"kind\": \"eval\"", "\"top1\"", "\"top5\"", "\"loss\"",
                          "\"classes\"", "\"confusion\""}) {
    EXPECT_THAT(status.out, HasSubstr(key));
  }
  // An evaluation is not evaluated again: refused before anything is submitted.
  const Ran again = Tessctl({"eval", absl::StrCat(eval_id)});
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_THAT(again.out, HasSubstr("is an evaluation"));
}

// After the torchvision reference (torchvision_reference.h): the same
// weights again, in with-crop/, with torchvision's preprocessing in their
// metadata as Tessera's export writes it: the whole image (crop_pct 1) at the
// model's 32 px.
constexpr char kWithPreprocessingScript[] = R"(
os.makedirs(out + "/with-crop", exist_ok=True)
save(out + "/with-crop/model.safetensors", load(out + "/model.safetensors"),
     {"pretrained_cfg": json.dumps({"crop_pct": 1.0, "input_size": [3, 32, 32]})})
)";

TEST_F(EvalE2eTest, TorchvisionModelScoresTorchvisionsAccuracyWithItsPreprocessing) {
  namespace reference = trainer::torchvision_reference;
  if (std::getenv("TESSERA_REQUIRE_TORCHVISION") != nullptr) {
    ASSERT_TRUE(reference::HaveTorchvision())
        << "no torch and torchvision, and TESSERA_REQUIRE_TORCHVISION is set";
  }
  if (!reference::HaveTorchvision()) {
    GTEST_SKIP() << reference::kPython << " with torch and torchvision is not installed "
                 << "(Debian: python3-torchvision)";
  }
  const std::string out = dir_.File("torchvision");
  std::filesystem::create_directories(out);
  ASSERT_TRUE(reference::RunPythonScript(
      out, "folder_reference.py",
      absl::StrCat(reference::kSafetensorsPython, reference::kImageFolderScript,
                   kWithPreprocessingScript),
      // A faint tint: about 72% top-1, where a resampled image scores otherwise.
      out + " 8"));
  const nlohmann::json expected =
      nlohmann::json::parse(testing::ReadFile(out + "/reference.json"));
  StartCoordinator();
  StartWorker("w1", port_);
  WaitForWorkers(1);
  const std::vector<std::string> eval = {
      "eval",        "--model", "vit-micro", "--names",  "torchvision", "--data",
      out + "/data", "--split", "val",       "--device", "cpu"};
  auto with = [&eval](std::vector<std::string> more) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };

  // The preprocessing given: no crop of the 32 px images.
  const v1::Job set =
      SubmitAndWait(with({"--from", out + "/model.safetensors", "--image-size", "32",
                          "--set", "trainer.crop_fraction=1"}));
  ASSERT_EQ(set.state(), v1::JOB_STATE_SUCCEEDED) << set.reason() << DumpLogs();
  ASSERT_TRUE(set.ranks(0).has_eval()) << DumpLogs();
  EXPECT_EQ(set.ranks(0).eval().samples(), expected["samples"].get<int64_t>());
  EXPECT_DOUBLE_EQ(set.ranks(0).eval().top1(), expected["top1"].get<double>());
  EXPECT_NEAR(set.ranks(0).eval().loss(), expected["loss"].get<double>(), 1e-4);
  const Ran waited = Tessctl({"wait", absl::StrCat(set.id())});
  EXPECT_THAT(waited.out, HasSubstr(": val accuracy "));

  // The preprocessing that comes with the file: its metadata's crop and size.
  const v1::Job carried =
      SubmitAndWait(with({"--from", out + "/with-crop/model.safetensors"}));
  ASSERT_EQ(carried.state(), v1::JOB_STATE_SUCCEEDED) << carried.reason() << DumpLogs();
  ASSERT_TRUE(carried.ranks(0).has_eval()) << DumpLogs();
  EXPECT_DOUBLE_EQ(carried.ranks(0).eval().top1(), expected["top1"].get<double>());
  EXPECT_NEAR(carried.ranks(0).eval().loss(), expected["loss"].get<double>(), 1e-4);
  const Ran log = Tessctl({"logs", absl::StrCat(carried.id())});
  EXPECT_THAT(log.out, HasSubstr("crop_fraction=1 (the weights' metadata)"));
  EXPECT_THAT(log.out, HasSubstr("image_size=32 (the weights' metadata)"));

  // Neither: the trainer's default crop (0.875) resamples the images.
  const v1::Job plain =
      SubmitAndWait(with({"--from", out + "/model.safetensors", "--image-size", "32"}));
  ASSERT_EQ(plain.state(), v1::JOB_STATE_SUCCEEDED) << plain.reason() << DumpLogs();
  EXPECT_THAT(Tessctl({"logs", absl::StrCat(plain.id())}).out,
              HasSubstr("crop_fraction=0.875 (default)"));
  ASSERT_TRUE(plain.ranks(0).has_eval()) << DumpLogs();
  EXPECT_GT(std::abs(plain.ranks(0).eval().loss() - expected["loss"].get<double>()), 1e-3)
      << "the default crop should score other images than torchvision's";
  std::cout << "on val, top-1 / loss: torchvision " << expected["top1"].get<double>()
            << " / " << expected["loss"].get<double>()
            << "; tessctl eval --set trainer.crop_fraction=1 "
            << set.ranks(0).eval().top1() << " / " << set.ranks(0).eval().loss()
            << "; the file's metadata " << carried.ranks(0).eval().top1() << " / "
            << carried.ranks(0).eval().loss() << "; the default crop 0.875 "
            << plain.ranks(0).eval().top1() << " / " << plain.ranks(0).eval().loss()
            << std::endl;
}

}  // namespace
}  // namespace tessera
