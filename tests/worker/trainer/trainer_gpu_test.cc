// tessera-train on a GPU (label gpu; each test skips without a CUDA device):
// the step captured in a CUDA graph trains like the eager step, and bf16 and
// fp16 train like fp32. Runs the binaries as a user would; the parameters are
// compared through tessera-export's safetensors file.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/device_figures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/trainer/run_binary.h"
#include "worker/trainer/model/safetensors.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

using ::tessera::testing::RunResult;

std::string Bin(const std::string& name) { return ::tessera::testing::BinaryPath(name); }

RunResult RunBinary(const std::string& name, const std::vector<std::string>& args) {
  return ::tessera::testing::RunBinary(name, args, /*limit_s=*/600);
}

bool CudaVisible() {
  // An empty CUDA_VISIBLE_DEVICES hides every device.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && visible[0] == '\0') return false;
  // nvidia-smi lists the devices of the machine.
  FILE* pipe = popen("nvidia-smi -L 2>/dev/null", "r");
  if (pipe == nullptr) return false;
  char buffer[256];
  const bool any = fgets(buffer, sizeof(buffer), pipe) != nullptr;
  pclose(pipe);
  return any;
}

// Every "loss" point of a --metrics-file, by step.
std::map<int64_t, double> Losses(const std::string& path) {
  std::map<int64_t, double> losses;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json point = nlohmann::json::parse(line);
    if (point["name"] == "loss") losses[point["step"].get<int64_t>()] = point["value"];
  }
  return losses;
}

class TrainerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Bin("tessera-train")))
      GTEST_SKIP() << "no tessera-train";
    if (!CudaVisible()) GTEST_SKIP() << "no CUDA device is visible";
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("gpu_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A run of `steps` on synthetic data at 224 px; `name` names its files.
  RunResult Train(const std::string& name, const std::string& model, int steps, int batch,
                  const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "--model=" + model,
        "--dataset=synthetic",
        absl::StrCat("--train-subset=", batch * 50),
        "--test-subset=128",
        absl::StrCat("--batch-size=", batch),
        "--image-size=224",
        "--device=cuda",
        absl::StrCat("--max-steps=", steps),
        "--metrics-every=1",
        "--seed=5",
        "--data-workers=4",
        "--metrics-file=" + (dir_ / (name + ".jsonl")).string(),
        "--checkpoint-dir=" + (dir_ / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunBinary("tessera-train", args);
  }

  // The trained parameters, by name, through tessera-export.
  std::map<std::string, std::vector<float>> Parameters(const std::string& name,
                                                       const std::string& model) {
    const std::string file = (dir_ / (name + ".safetensors")).string();
    const RunResult exported =
        RunBinary("tessera-export", {"--checkpoint=" + (dir_ / name).string(),
                                     "--model=" + model, "--channels=1", "--classes=10",
                                     "--image-size=224", "--names=tessera", "-o", file});
    EXPECT_EQ(exported.exit_code, 0) << exported.output;
    std::map<std::string, std::vector<float>> values;
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened = SafetensorsFile::Open(file);
    if (!opened.ok()) {
      ADD_FAILURE() << opened.status();
      return values;
    }
    for (const TensorView& t : (*opened)->tensors()) values[t.name] = *TensorToFloat32(t);
    return values;
  }

  // Run `name`'s trained vit-s16 parameters within 2e-2 relative L2 of run
  // `reference`'s, tensor by tensor (bf16 autocast: a few units of its 8-bit
  // mantissa); prints the worst as FIGURE <figure>_max_relative_param_diff.
  void ExpectParametersClose(const std::string& name, const std::string& reference,
                             const std::string& figure);

  std::filesystem::path dir_;
};

// ||a - b|| / ||b|| over one tensor.
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    norm += b[i] * static_cast<double>(b[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

void TrainerGpuTest::ExpectParametersClose(const std::string& name,
                                           const std::string& reference,
                                           const std::string& figure) {
  const auto expected = Parameters(reference, "vit-s16");
  const auto got = Parameters(name, "vit-s16");
  ASSERT_EQ(expected.size(), got.size());
  double worst = 0;
  for (const auto& [tensor, values] : expected) {
    const double d = RelativeDifference(got.at(tensor), values);
    EXPECT_LT(d, 2e-2) << tensor;
    worst = std::max(worst, d);
  }
  std::cout << "FIGURE " << figure << "_max_relative_param_diff=" << worst << std::endl;
}

TEST_F(TrainerGpuTest, TheCapturedStepTrainsLikeTheEagerStep) {
  const RunResult eager = Train("eager", "vit-s16", 20, 64, {"--precision=bf16"});
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  const RunResult captured =
      Train("captured", "vit-s16", 20, 64, {"--precision=bf16", "--cuda-graph=on"});
  ASSERT_EQ(captured.exit_code, 0) << captured.output;
  EXPECT_THAT(captured.output, HasSubstr("captured in a CUDA graph"));

  const std::map<int64_t, double> eager_loss = Losses((dir_ / "eager.jsonl").string());
  const std::map<int64_t, double> captured_loss =
      Losses((dir_ / "captured.jsonl").string());
  ASSERT_EQ(eager_loss.size(), 20u);
  ASSERT_EQ(captured_loss.size(), 20u);
  for (const auto& [step, loss] : eager_loss) {
    EXPECT_NEAR(captured_loss.at(step), loss, 0.01 * std::abs(loss)) << "step " << step;
  }
  ExpectParametersClose("captured", "eager", "captured_vs_eager");
}

// A resumed process captures after its own two eager steps, and every replay
// reads the true step count: a graph that froze AdamW's bias correction at the
// resume step moves the parameters visibly off the eager resume's.
TEST_F(TrainerGpuTest, ACapturedResumeTrainsLikeAnEagerResume) {
  const RunResult first = Train("first", "vit-s16", 20, 64, {"--precision=bf16"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const std::string name : {"eager_resume", "captured_resume"}) {
    std::filesystem::copy(dir_ / "first", dir_ / name,
                          std::filesystem::copy_options::recursive);
  }
  const RunResult eager =
      Train("eager_resume", "vit-s16", 40, 64, {"--precision=bf16", "--resume=true"});
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  const RunResult captured =
      Train("captured_resume", "vit-s16", 40, 64,
            {"--precision=bf16", "--resume=true", "--cuda-graph=on"});
  ASSERT_EQ(captured.exit_code, 0) << captured.output;
  EXPECT_THAT(captured.output, HasSubstr("step 23: training step captured"));

  const auto eager_loss = Losses((dir_ / "eager_resume.jsonl").string());
  const auto captured_loss = Losses((dir_ / "captured_resume.jsonl").string());
  ASSERT_EQ(eager_loss.count(40), 1u);
  for (int64_t step = 21; step <= 40; ++step) {
    ASSERT_EQ(captured_loss.count(step), 1u) << "step " << step;
    EXPECT_NEAR(captured_loss.at(step), eager_loss.at(step), 0.01 * eager_loss.at(step))
        << "step " << step;
  }
  ExpectParametersClose("captured_resume", "eager_resume", "captured_resume_vs_eager");
}

TEST_F(TrainerGpuTest, Bf16AndFp16TrainLikeFp32From200StepsOfTheSameStart) {
  std::map<std::string, double> final_loss;
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    const RunResult run =
        Train(precision, "vit-b16", 200, 32, {"--precision=" + precision, "--lr=3e-4"});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::map<int64_t, double> losses =
        Losses((dir_ / (precision + ".jsonl")).string());
    ASSERT_EQ(losses.count(200), 1u);
    // The mean of the last 10 steps: one step's loss is noisy at any precision.
    double sum = 0;
    for (int64_t step = 191; step <= 200; ++step) sum += losses.at(step);
    final_loss[precision] = sum / 10;
    std::cout << "FIGURE vit_b16_loss_200_" << precision << "=" << final_loss[precision]
              << std::endl;
  }
  EXPECT_NEAR(final_loss["bf16"], final_loss["fp32"], 0.02 * final_loss["fp32"]);
  EXPECT_NEAR(final_loss["fp16"], final_loss["fp32"], 0.02 * final_loss["fp32"]);
}

TEST_F(TrainerGpuTest, TheAllocatorsPeakAfterAViTB16StepIsPlausible) {
  const RunResult run = Train("memory", "vit-b16", 3, 128, {"--precision=bf16"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  double peak = 0;
  std::ifstream in(dir_ / "memory.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json point = nlohmann::json::parse(line);
    if (point["name"] == kCudaPeakAllocatedFigure) peak = point["value"];
  }
  std::cout << "FIGURE vit_b16_batch128_peak_allocated_gb=" << peak / 1e9 << std::endl;
  // Weights, gradients and AdamW moments (1.4 GB) and batch 128's
  // activations: gigabytes, not megabytes, and within one GPU.
  EXPECT_GT(peak, 5e9);
  EXPECT_LT(peak, 80e9);
}

}  // namespace
}  // namespace tessera::trainer
