// tessctl's search commands against the fake JobService (fake_job_service.h):
// submit with local validation and a client request id, list, status, report
// (golden table, CSV and JSON), cancel, best and its export, and the usage
// errors of the `search` group.
#include "cli/search_commands.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
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
#include "cli/search_output.h"
#include "common/job_spec.h"
#include "common/search_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/cli/fake_job_service.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

std::filesystem::path SourceRoot() {
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

constexpr char kSpec[] = R"(name: lr-study
search:
  method: random
  seed: 3
  metric: val_accuracy
  max_trials: 6
  max_length: 400
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
    weight_decay: {choice: [0, 0.05]}
base:
  world_size: 1
  trainer:
    model: vit-micro
    dataset: synthetic
    batch_size: 16
    val_fraction: 0.1
    checkpoint_dir: /ckpt
)";

class SearchCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<CoordinatorClient> MakeClient() {
    return std::make_unique<CoordinatorClient>(
        channel_, CoordinatorClient::Options{.target = "in-process"});
  }

  int Cli(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return RunTessctl(
        args, [this](const ConnectionOptions&) { return MakeClient(); }, out_, err_);
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) /
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                     name);
    std::ofstream(path) << text;
    return path.string();
  }

  fakes::FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::ostringstream out_;
  std::ostringstream err_;
};

// ---- submit ----

TEST_F(SearchCommandsTest, FileShorthandValidatesSubmitsAndPrintsTrialsThenIdLast) {
  ASSERT_EQ(Cli({"search", WriteFile("spec.yaml", kSpec)}), kExitOk) << err_.str();
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("submitted search 1 (lr-study): random, 6 trials", "1"));
  const std::vector<v1::SubmitSearchRequest> submits = service_.search_submits();
  ASSERT_EQ(submits.size(), 1u);
  absl::StatusOr<v1::SearchSpec> expected =
      ParseAndValidateSearchSpec(kSpec, SpecLimits{});
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(submits[0].spec(), *expected));
  EXPECT_EQ(submits[0].spec_yaml(), kSpec);
  EXPECT_THAT(submits[0].client_request_id(), ::testing::MatchesRegex("[0-9a-f]{32}"));
}

TEST_F(SearchCommandsTest, SubmitAppliesSetOverridesBeforeValidating) {
  ASSERT_EQ(Cli({"search", "submit", WriteFile("spec.yaml", kSpec), "--set",
                 "search.max_trials=9", "--set", "base.trainer.batch_size=32"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(Lines(out_.str()).front(), "submitted search 1 (lr-study): random, 9 trials");
  const std::vector<v1::SubmitSearchRequest> submits = service_.search_submits();
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].spec().search().max_trials(), 9);
  EXPECT_EQ(submits[0].spec().base().trainer().batch_size(), 32);
}

TEST_F(SearchCommandsTest, RetriedSubmitReusesTheClientRequestId) {
  service_.FailNextSubmits(1);
  std::unique_ptr<CoordinatorClient> client = MakeClient();
  SearchSubmitOptions options;
  options.spec_path = WriteFile("spec.yaml", kSpec);
  options.initial_backoff = absl::Milliseconds(1);
  ASSERT_EQ(RunSearchSubmit(options, *client, out_, err_), kExitOk) << err_.str();
  const std::vector<v1::SubmitSearchRequest> submits = service_.search_submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_EQ(submits[0].client_request_id(), submits[1].client_request_id());
  EXPECT_THAT(err_.str(), HasSubstr("retrying"));
  EXPECT_EQ(Lines(out_.str()).back(), "1");
}

TEST_F(SearchCommandsTest, SpecErrorsExitTwoNamingTheKeyAndSendNothing) {
  std::string unknown = kSpec;
  unknown.replace(unknown.find("weight_decay"), 12, "weight_decayy");
  EXPECT_EQ(Cli({"search", WriteFile("unknown.yaml", unknown)}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("invalid search spec"));
  EXPECT_THAT(err_.str(), HasSubstr("weight_decayy"));

  std::string log_zero = kSpec;
  log_zero.replace(log_zero.find("1e-4"), 4, "0");
  EXPECT_EQ(Cli({"search", "submit", WriteFile("log.yaml", log_zero)}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("search.parameters.lr"));

  EXPECT_EQ(
      Cli({"search", WriteFile("spec.yaml", kSpec), "--set", "search.metric=nonsense"}),
      kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("search.metric"));

  EXPECT_EQ(Cli({"search", "/nonexistent/search.yaml"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("/nonexistent/search.yaml"));
  EXPECT_TRUE(service_.search_submits().empty());
}

TEST_F(SearchCommandsTest, TheExampleSpecIsValid) {
  const std::string text = ReadText(SourceRoot() / "examples/search-vit-micro-asha.yaml");
  ASSERT_FALSE(text.empty());
  absl::StatusOr<v1::SearchSpec> spec = ParseAndValidateSearchSpec(text, SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(SearchTrialCount(*spec), 27);
  EXPECT_EQ(SearchRungLengths(spec->search()).size(), 3u);
}

TEST_F(SearchCommandsTest, CommandLineMisuseExitsTwoWithTheCommandsUsage) {
  EXPECT_EQ(Cli({"search"}), kExitUsage);
  EXPECT_EQ(err_.str(),
            "tessctl search: give a search spec FILE or a subcommand (submit, list, "
            "status, report, cancel, best); see tessctl search --help\n");
  EXPECT_EQ(Cli({"search", "status", "1", "--set", "a=b"}), kExitUsage);
  EXPECT_EQ(err_.str(),
            "tessctl search: FILE and --set go with `search FILE` or `search submit "
            "FILE`, not with `search status`\n");
  EXPECT_EQ(Cli({"search", "status"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("search"));
  EXPECT_EQ(Cli({"search", "report", "0"}), kExitUsage);
  EXPECT_EQ(Cli({"search", "report", "1", "-o", "yaml"}), kExitUsage);
  EXPECT_EQ(Cli({"search", "status", "1", "-o", "csv"}), kExitUsage);
  EXPECT_EQ(Cli({"search", "best", "1", "--names", "keras"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("Run `tessctl search best --help` for usage."));
  EXPECT_TRUE(service_.search_submits().empty());
}

// ---- reading a search ----

v1::SearchTrial MakeTrial(int index, const std::string& lr, const std::string& wd,
                          const std::string& status, int rung, int64_t steps,
                          std::vector<int64_t> jobs, std::vector<double> metrics) {
  v1::SearchTrial t;
  t.set_index(index);
  (*t.mutable_parameters())["lr"] = lr;
  (*t.mutable_parameters())["weight_decay"] = wd;
  t.set_status(status);
  t.set_rung(rung);
  t.set_steps(steps);
  t.set_promoted(rung > 0);
  for (int64_t j : jobs) t.add_job_ids(j);
  for (double m : metrics) t.add_rung_metrics(m);
  if (!metrics.empty())
    t.set_best_metric(*std::max_element(metrics.begin(), metrics.end()));
  t.set_state(status == "running"  ? v1::JOB_STATE_RUNNING
              : status == "failed" ? v1::JOB_STATE_FAILED
                                   : v1::JOB_STATE_SUCCEEDED);
  return t;
}

// An asha search, 9 trials at most, 3 rungs of 100, 300 and 900 steps: trial
// 1 promoted twice and completed (the best), trial 0 paused, trial 2 failed,
// trial 3 running its first rung.
v1::Search MakeSearch() {
  absl::StatusOr<v1::SearchSpec> spec = ParseSearchSpec(R"(name: lr-study
search:
  method: asha
  seed: 3
  metric: val_accuracy
  max_trials: 9
  max_length: 900
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
    weight_decay: {choice: [0, 0.05]}
  asha: {reduction_factor: 3, min_length: 100}
base:
  trainer: {model: vit-micro, dataset: synthetic, checkpoint_dir: /ckpt}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  v1::Search search;
  search.set_id(4);
  search.set_name("lr-study");
  search.set_owner("ada");
  search.set_state(v1::SEARCH_STATE_RUNNING);
  *search.mutable_spec() = *spec;
  *search.add_trials() = MakeTrial(0, "0.0003", "0", "paused", 0, 100, {11}, {0.61});
  *search.add_trials() = MakeTrial(1, "0.002", "0.05", "completed", 2, 900, {12, 15, 16},
                                   {0.7, 0.8125, 0.875});
  *search.add_trials() = MakeTrial(2, "0.009", "0", "failed", 0, 0, {13}, {});
  *search.add_trials() = MakeTrial(3, "0.0001", "0.05", "running", 0, 0, {14}, {});
  search.set_best_trial(1);
  return search;
}

TEST_F(SearchCommandsTest, ReportTableMarksTheBestTrial) {
  service_.AddSearch(MakeSearch());
  ASSERT_EQ(Cli({"search", "report", "4"}), kExitOk) << err_.str();
  EXPECT_EQ(
      out_.str(),
      "BEST  TRIAL  lr      weight_decay  STATUS     RUNG  STEPS  VAL_ACCURACY  JOB\n"
      "      0      0.0003  0             paused     0     100    0.61          11\n"
      "*     1      0.002   0.05          completed  2     900    0.875         16\n"
      "      2      0.009   0             failed     0     0      -             13\n"
      "      3      0.0001  0.05          running    0     0      -             14\n");
}

TEST_F(SearchCommandsTest, ReportCsvHasAColumnPerParameterAndTheRungMetrics) {
  service_.AddSearch(MakeSearch());
  ASSERT_EQ(Cli({"search", "report", "4", "-o", "csv"}), kExitOk) << err_.str();
  EXPECT_EQ(
      out_.str(),
      "trial,lr,weight_decay,status,rung,steps,best_metric,best,state,job_ids,"
      "rung_metrics\n"
      "0,0.0003,0,paused,0,100,0.61,false,SUCCEEDED,11,0.61\n"
      "1,0.002,0.05,completed,2,900,0.875,true,SUCCEEDED,12 15 16,0.7 0.8125 0.875\n"
      "2,0.009,0,failed,0,0,,false,FAILED,13,\n"
      "3,0.0001,0.05,running,0,0,,false,RUNNING,14,\n");
}

TEST_F(SearchCommandsTest, ReportJsonGolden) {
  v1::Search search = MakeSearch();
  // Two trials are enough for the shape.
  search.mutable_trials()->DeleteSubrange(2, 2);
  service_.AddSearch(search);
  ASSERT_EQ(Cli({"search", "report", "4", "-o", "json"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), R"({
  "search_id": 4,
  "name": "lr-study",
  "state": "RUNNING",
  "method": "asha",
  "metric": "val_accuracy",
  "mode": "max",
  "best_trial": 1,
  "trials": [
    {
      "trial": 0,
      "parameters": {
        "lr": "0.0003",
        "weight_decay": "0"
      },
      "status": "paused",
      "state": "SUCCEEDED",
      "rung": 0,
      "steps": 100,
      "best_metric": 0.61,
      "rung_metrics": [
        0.61
      ],
      "promoted": false,
      "job_ids": [
        11
      ],
      "best": false
    },
    {
      "trial": 1,
      "parameters": {
        "lr": "0.002",
        "weight_decay": "0.05"
      },
      "status": "completed",
      "state": "SUCCEEDED",
      "rung": 2,
      "steps": 900,
      "best_metric": 0.875,
      "rung_metrics": [
        0.7,
        0.8125,
        0.875
      ],
      "promoted": true,
      "job_ids": [
        12,
        15,
        16
      ],
      "best": true
    }
  ]
}
)");
}

TEST_F(SearchCommandsTest, ReportBeforeAnyMetricHasNoBestTrial) {
  v1::Search search = MakeSearch();
  search.mutable_trials()->DeleteSubrange(0, 2);
  search.set_best_trial(-1);
  service_.AddSearch(search);
  ASSERT_EQ(Cli({"search", "report", "4", "-o", "json"}), kExitOk) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_TRUE(j["best_trial"].is_null());
  EXPECT_TRUE(j["trials"][0]["best_metric"].is_null());
  EXPECT_EQ(j["trials"][0]["best"], false);
  ASSERT_EQ(Cli({"search", "report", "4"}), kExitOk);
  EXPECT_THAT(out_.str(), Not(HasSubstr("*")));
}

TEST_F(SearchCommandsTest, StatusShowsMethodCountsAndTheBestTrial) {
  service_.AddSearch(MakeSearch());
  ASSERT_EQ(Cli({"search", "status", "4"}), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_GE(lines.size(), 10u);
  EXPECT_THAT(
      std::vector<std::string>(lines.begin(), lines.begin() + 9),
      ElementsAre("SEARCH      4", "NAME        lr-study", "OWNER       ada",
                  "STATE       RUNNING", "METHOD      asha (eta 3, 3 rungs, seed 3)",
                  "METRIC      val_accuracy, max", "LENGTH      900 steps",
                  "CONCURRENT  1",
                  "TRIALS      4 of 9 started: 1 running, 1 paused, 1 "
                  "completed, 0 stopped, 1 failed"));
  EXPECT_EQ(lines[9],
            "BEST        trial 1 (lr=0.002, weight_decay=0.05): val_accuracy 0.875, "
            "job 16");

  ASSERT_EQ(Cli({"search", "status", "4", "-o", "json"}), kExitOk) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["id"], 4);
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["best_trial"], 1);
  EXPECT_EQ(j["max_trials"], 9);
  EXPECT_EQ(j["counts"]["started"], 4);
  EXPECT_EQ(j["counts"]["failed"], 1);
  ASSERT_EQ(j["trials"].size(), 4u);
  EXPECT_EQ(j["trials"][1]["job_ids"], nlohmann::json::array({12, 15, 16}));
  EXPECT_EQ(j["spec"]["search"]["method"], "asha");
  EXPECT_TRUE(j.contains("spec_yaml"));
}

TEST_F(SearchCommandsTest, ListTableCsvAndJson) {
  v1::Search search = MakeSearch();
  search.set_state(v1::SEARCH_STATE_SUCCEEDED);
  search.set_reason("best: trial 1");
  service_.AddSearch(search);
  ASSERT_EQ(Cli({"search", "list"}), kExitOk) << err_.str();
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("ID  NAME      METHOD  STATE      TRIALS  RUNNING  FAILED  "
                          "BEST   AGE  REASON",
                          "4   lr-study  asha    SUCCEEDED  4/9     1        1       "
                          "0.875  -    best: trial 1"));
  ASSERT_EQ(Cli({"search", "list", "-o", "csv"}), kExitOk);
  EXPECT_EQ(out_.str(),
            "id,name,method,state,max_trials,started,running,failed,best_trial,"
            "best_metric,created_unix_ms,updated_unix_ms,reason\n"
            "4,lr-study,asha,SUCCEEDED,9,4,1,1,1,0.875,0,0,best: trial 1\n");
  ASSERT_EQ(Cli({"search", "list", "-o", "json"}), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["state"], "SUCCEEDED");
  EXPECT_EQ(j[0]["best_trial"], 1);
  EXPECT_FALSE(j[0].contains("trials"));
}

TEST_F(SearchCommandsTest, UnknownSearchExitsThree) {
  for (const char* command : {"status", "report", "cancel", "best"}) {
    EXPECT_EQ(Cli({"search", command, "9"}), kExitNotFound) << command;
    EXPECT_EQ(err_.str(), "tessctl: search 9 not found\n") << command;
  }
}

TEST_F(SearchCommandsTest, CancelRecordsCancelledAndRefusesEndedSearches) {
  service_.AddSearch(MakeSearch());
  EXPECT_EQ(Cli({"search", "cancel", "4"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "search 4 CANCELLED\n");
  EXPECT_EQ(Cli({"search", "cancel", "4"}), kExitFailed);
  EXPECT_EQ(err_.str(), "tessctl: search 4 already ended\n");
}

TEST_F(SearchCommandsTest, BestPrintsTheBestTrialOrExitsOneWithoutIt) {
  service_.AddSearch(MakeSearch());
  ASSERT_EQ(Cli({"search", "best", "4"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "best trial 1 of search 4: val_accuracy 0.875 at rung 2 (900 steps, "
            "completed), job 16\n"
            "  lr: 0.002\n"
            "  weight_decay: 0.05\n");
  ASSERT_EQ(Cli({"search", "best", "4", "-o", "json"}), kExitOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str())["parameters"]["lr"], "0.002");

  v1::Search none = MakeSearch();
  none.set_id(5);
  none.set_best_trial(-1);
  service_.AddSearch(none);
  EXPECT_EQ(Cli({"search", "best", "5"}), kExitFailed);
  EXPECT_EQ(err_.str(),
            "tessctl: search 5 (RUNNING) has no best trial yet: no trial has reported "
            "val_accuracy\n");
}

// `search best --export` is `tessctl export` of the best trial's latest job:
// the exporter reads that job's checkpoint folder (the trial's own).
TEST_F(SearchCommandsTest, BestExportRunsTheExporterOnTheBestTrialsLatestJob) {
  v1::Job job;
  job.set_id(16);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->set_name("lr-study/t1-r2");
  v1::TrainerConfig* trainer = job.mutable_spec()->mutable_trainer();
  trainer->set_model("vit-micro");
  trainer->set_dataset("synthetic");
  trainer->set_image_size(28);
  trainer->set_checkpoint_dir("/ckpt/search-4/trial-1");
  service_.AddJob(job);
  service_.AddSearch(MakeSearch());
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile(
      "exporter.sh", absl::StrCat("#!/bin/sh\necho \"$@\" > ", args_file, "\n"));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);

  ASSERT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "--names", "timm",
                 "--exporter", exporter}),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("best trial 1 of search 4"));
  EXPECT_THAT(
      out_.str(),
      HasSubstr("tessctl export: job 16 (vit-micro) from /ckpt/search-4/trial-1"));
  const std::string args = ReadText(args_file);
  EXPECT_THAT(args, HasSubstr("--checkpoint /ckpt/search-4/trial-1"));
  EXPECT_THAT(args, HasSubstr("--names timm"));
  EXPECT_THAT(args, HasSubstr("-o best.safetensors"));
}

}  // namespace
}  // namespace tessera::cli
