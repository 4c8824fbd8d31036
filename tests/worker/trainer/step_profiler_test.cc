// tessera-train's step profile (--profile-steps, step_profiler.h) on the CPU:
// the files it writes, what they hold, and the table in the log.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/trainer/run_binary.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

using ::tessera::testing::RunResult;

std::string Binary() { return ::tessera::testing::BinaryPath("tessera-train"); }

RunResult RunTrainer(const std::vector<std::string>& args) {
  return ::tessera::testing::RunBinary("tessera-train", args);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());  // throws, failing the test, unless JSON
}

class StepProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Binary())) GTEST_SKIP() << Binary() << " is not built";
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("step_profile_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Run(int max_steps, const std::string& window) const {
    return {"--dataset=synthetic",       "--model=vit-micro",
            "--train-subset=512",        "--test-subset=64",
            "--batch-size=16",           absl::StrCat("--max-steps=", max_steps),
            "--metrics-every=2",         "--cpu-kernels=aten",
            "--profile-steps=" + window, "--profile-dir=" + dir_.string()};
  }

  std::filesystem::path dir_;
};

TEST_F(StepProfilerTest, WritesATraceWithTheStepsOperatorsAndPrintsTheTopOperators) {
  const RunResult run = RunTrainer(Run(6, "2-4"));
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const nlohmann::json trace = ReadJson((dir_ / "trace.json").string());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::set<std::string> names;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event.contains("name") && event["name"].is_string()) {
      names.insert(event["name"].get<std::string>());
    }
  }
  // The forward's matrix products and the backward's (LibTorch's kernels, as
  // on a GPU: --cpu-kernels=aten).
  EXPECT_TRUE(names.contains("aten::addmm") || names.contains("aten::mm"));
  EXPECT_TRUE(names.contains("aten::layer_norm") ||
              names.contains("aten::native_layer_norm") || names.contains("aten::linear"))
      << absl::StrJoin(names, ", ");

  const nlohmann::json summary = ReadJson((dir_ / "summary.json").string());
  EXPECT_EQ(summary["kind"], "cpu");
  EXPECT_EQ(summary["steps"], 3);
  ASSERT_FALSE(summary["rows"].empty());
  EXPECT_GT(summary["wall_ms"].get<double>(), 0);
  EXPECT_GT(summary["cpu_operators"].get<int64_t>(), 3 * 50);  // a ViT step's worth

  EXPECT_THAT(run.output, HasSubstr("[rank 0] profile of steps 2-4: top 25 operators by "
                                    "self CPU time, per step (3 steps)"));
  EXPECT_THAT(run.output,
              ::testing::ContainsRegex("\n  aten::(add)?mm +[0-9.]+ +[0-9.]+"));
  EXPECT_THAT(run.output,
              HasSubstr(absl::StrCat("profile written: ", dir_.string(), "/trace.json")));
}

TEST_F(StepProfilerTest, AWindowTheRunCutsShortKeepsTheStepsItRecorded) {
  const RunResult run = RunTrainer(Run(4, "3-10"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json summary = ReadJson((dir_ / "summary.json").string());
  EXPECT_EQ(summary["steps"], 2);
  EXPECT_THAT(run.output, HasSubstr("profile of steps 3-4"));
}

TEST_F(StepProfilerTest, AWindowThatIsNotARangeIsAUsageError) {
  const RunResult run = RunTrainer(Run(4, "5-2"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--profile-steps"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "trace.json"));
}

}  // namespace
}  // namespace tessera::trainer
