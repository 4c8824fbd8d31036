// tessctl against the real coordinator (CoordinatorServer with an in-memory
// store, reached over its in-process channel): the job filters, the sweep
// commands and --token end to end through the coordinator's JobService, with no
// workers, so jobs stay QUEUED.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/app.h"
#include "cli/client.h"
#include "cli/exit_codes.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSweep[] =
    "name: study\n"
    "grid:\n"
    "  world_size: [1, 2]\n"
    "  batch_size: [8, 16]\n"
    "  scaling: [strong]\n"
    "base:\n"
    "  trainer: {model: vit-micro, dataset: synthetic, max_steps: 5}\n";

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

class TessctlCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.listen = "";
    options.db_path = ":memory:";
    // tessctl's token handling is covered against the fake service.
    options.auth.enabled = false;
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
        CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = server_->InProcessChannel();
  }

  void TearDown() override { server_->Shutdown(); }

  // Runs a command line; returns its exit code, with its output in out_/err_.
  int Cli(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return RunTessctl(
        args,
        [this](const ConnectionOptions& connection) {
          return std::make_unique<CoordinatorClient>(
              channel_, CoordinatorClient::Options{.target = "in-process",
                                                   .token = connection.token});
        },
        out_, err_);
  }

  std::string WriteSweep(const std::string& text) {
    const std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) /
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(),
                     ".yaml");
    std::ofstream(path) << text;
    return path.string();
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(TessctlCoordinatorTest, SweepSubmitStatusJobsReportAndCancel) {
  ASSERT_EQ(Cli({"--token", "t0ken", "sweep", WriteSweep(kSweep)}), kExitOk)
      << err_.str();
  EXPECT_THAT(Lines(out_.str()), ElementsAre("submitted sweep 1 (study): 4 points", "1"));

  // max_parallel 1: the first point's job is submitted, the others wait.
  ASSERT_EQ(Cli({"sweep", "status", "1", "-o", "json"}), kExitOk) << err_.str();
  nlohmann::json sweep = nlohmann::json::parse(out_.str());
  EXPECT_EQ(sweep["state"], "RUNNING");
  ASSERT_EQ(sweep["points"].size(), 4u);
  EXPECT_EQ(sweep["points"][0]["state"], "QUEUED");
  ASSERT_TRUE(sweep["points"][0]["job_id"].is_number());
  const int64_t job_id = sweep["points"][0]["job_id"].get<int64_t>();
  EXPECT_EQ(sweep["points"][1]["state"], "PENDING");
  EXPECT_EQ(sweep["counts"]["waiting"], 4);

  ASSERT_EQ(Cli({"jobs", "--sweep", "1", "--state", "queued", "-o", "json"}), kExitOk)
      << err_.str();
  nlohmann::json jobs = nlohmann::json::parse(out_.str());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], job_id);
  EXPECT_EQ(jobs[0]["sweep_id"], 1);
  EXPECT_EQ(jobs[0]["sweep_point"], 0);
  ASSERT_EQ(Cli({"jobs", "--state", "running", "-o", "json"}), kExitOk);
  EXPECT_TRUE(nlohmann::json::parse(out_.str()).empty());

  // Nothing ran: one row per grid point, none counted.
  ASSERT_EQ(Cli({"sweep", "report", "1", "-o", "csv"}), kExitOk) << err_.str();
  const std::vector<std::string> rows = Lines(out_.str());
  ASSERT_EQ(rows.size(), 5u) << out_.str();
  EXPECT_THAT(rows[1], ::testing::StartsWith("1,8,strong,pack,0,"));

  ASSERT_EQ(Cli({"sweep", "list"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("study"));

  ASSERT_EQ(Cli({"sweep", "cancel", "1"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "sweep 1 CANCELLED\n");
  ASSERT_EQ(Cli({"status", absl::StrCat(job_id), "-o", "json"}), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["state"], "CANCELLED");
  EXPECT_EQ(Cli({"sweep", "cancel", "1"}), kExitFailed);
  EXPECT_EQ(Cli({"sweep", "follow", "1"}), kExitFailed);
  EXPECT_THAT(out_.str(), HasSubstr("sweep 1 CANCELLED after"));
}

TEST_F(TessctlCoordinatorTest, UnknownSweepAndJobExitThree) {
  EXPECT_EQ(Cli({"sweep", "status", "42"}), kExitNotFound);
  EXPECT_EQ(err_.str(), "tessctl: sweep 42 not found\n");
  EXPECT_EQ(Cli({"sweep", "report", "42"}), kExitNotFound);
  EXPECT_EQ(Cli({"status", "42"}), kExitNotFound);
}

TEST_F(TessctlCoordinatorTest, InvalidSweepIsRejectedLocallyAndNothingIsStored) {
  std::string bad = kSweep;
  bad.replace(bad.find("[1, 2]"), 6, "[0, 2]");
  EXPECT_EQ(Cli({"sweep", "submit", WriteSweep(bad)}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("grid.world_size[0]"));
  ASSERT_EQ(Cli({"sweep", "list", "-o", "json"}), kExitOk);
  EXPECT_TRUE(nlohmann::json::parse(out_.str()).empty());
}

}  // namespace
}  // namespace tessera::cli
