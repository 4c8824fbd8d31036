// tessctl's search commands against the fake JobService (fake_job_service.h):
// submit with local validation and a client request id, follow (and submit
// --follow), list, status, report (golden table, CSV and JSON), cancel, best
// and its export, and the usage errors of the `search` group.
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

// A spec that is valid but likely to mislead is submitted with a warning:
// here an asha first rung (44 steps) shorter than a warmup trials may draw.
TEST_F(SearchCommandsTest, SubmitWarnsOfAFirstRungShorterThanTheWarmupAndSubmits) {
  std::string asha = kSpec;
  asha.replace(asha.find("method: random"), 14, "method: asha");
  asha.replace(asha.find("    weight_decay: {choice: [0, 0.05]}\n"), 0,
               "    warmup_steps: {choice: [0, 200]}\n");
  ASSERT_EQ(Cli({"search", WriteFile("asha.yaml", asha)}), kExitOk) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("tessctl: warning: search.asha: the first rung ends "
                                    "after about 44 steps, before the warmup of trials "
                                    "with warmup_steps up to 200 ends"));
  EXPECT_EQ(service_.search_submits().size(), 1u);
  err_.str("");
  ASSERT_EQ(Cli({"search", WriteFile("spec.yaml", kSpec)}), kExitOk) << err_.str();
  EXPECT_THAT(err_.str(), ::testing::Not(HasSubstr("warning")));
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
            "tessctl search: give a search spec FILE or a subcommand (submit, follow, "
            "list, status, report, cancel, best); see tessctl search --help\n");
  EXPECT_EQ(Cli({"search", "status", "1", "--set", "a=b"}), kExitUsage);
  EXPECT_EQ(err_.str(),
            "tessctl search: FILE, --set and --follow go with `search FILE` or `search "
            "submit FILE`, not with `search status`\n");
  EXPECT_EQ(Cli({"search", "status", "1", "--follow"}), kExitUsage);
  EXPECT_EQ(Cli({"search", "follow"}), kExitUsage);
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
  if (!metrics.empty()) {
    // Where the best was recorded: its rung, that rung's job, and the step
    // where the rung stopped (rungs of 100, 300 and 900 steps).
    const auto best = std::max_element(metrics.begin(), metrics.end());
    const int best_rung = static_cast<int>(best - metrics.begin());
    t.set_best_metric(*best);
    t.set_best_rung(best_rung);
    t.set_best_job_id(jobs[best_rung]);
    t.set_best_step(std::vector<int64_t>{100, 300, 900}[best_rung]);
  }
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
      "BEST  TRIAL  lr      weight_decay  STATUS     RUNG  STEPS  VAL_ACCURACY  AT_STEP  "
      "JOB\n"
      "      0      0.0003  0             paused     0     100    0.61          100      "
      "11\n"
      "*     1      0.002   0.05          completed  2     900    0.875         900      "
      "16\n"
      "      2      0.009   0             failed     0     0      -             -        "
      "13\n"
      "      3      0.0001  0.05          running    0     0      -             -        "
      "14\n");
}

TEST_F(SearchCommandsTest, ReportCsvHasAColumnPerParameterAndTheRungMetrics) {
  service_.AddSearch(MakeSearch());
  ASSERT_EQ(Cli({"search", "report", "4", "-o", "csv"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "trial,lr,weight_decay,status,rung,steps,best_metric,best,state,job_ids,"
            "rung_metrics,best_rung,best_step,best_job_id\n"
            "0,0.0003,0,paused,0,100,0.61,false,SUCCEEDED,11,0.61,0,100,11\n"
            "1,0.002,0.05,completed,2,900,0.875,true,SUCCEEDED,12 15 16,0.7 0.8125 0.875,"
            "2,900,16\n"
            "2,0.009,0,failed,0,0,,false,FAILED,13,,,,\n"
            "3,0.0001,0.05,running,0,0,,false,RUNNING,14,,,,\n");
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
      "best_rung": 0,
      "best_step": 100,
      "best_job_id": 11,
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
      "best_rung": 2,
      "best_step": 900,
      "best_job_id": 16,
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
  EXPECT_TRUE(j["trials"][0]["best_step"].is_null());
  EXPECT_TRUE(j["trials"][0]["best_job_id"].is_null());
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
  for (const char* command : {"status", "report", "cancel", "best", "follow"}) {
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
            "best trial 1 of search 4: val_accuracy 0.875 at rung 2, step 900, job 16 "
            "(completed)\n"
            "  lr: 0.002\n"
            "  weight_decay: 0.05\n");
  ASSERT_EQ(Cli({"search", "best", "4", "-o", "json"}), kExitOk) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["parameters"]["lr"], "0.002");
  EXPECT_EQ(j["best_rung"], 2);
  EXPECT_EQ(j["best_step"], 900);
  EXPECT_EQ(j["best_job_id"], 16);

  v1::Search none = MakeSearch();
  none.set_id(5);
  none.set_best_trial(-1);
  service_.AddSearch(none);
  EXPECT_EQ(Cli({"search", "best", "5"}), kExitFailed);
  EXPECT_EQ(err_.str(),
            "tessctl: search 5 (RUNNING) has no best trial yet: no trial has reported "
            "val_accuracy\n");
}

// ---- follow ----

// MakeSearch()'s spec and id with `trials`, in `state`.
v1::Search SearchWith(v1::SearchState state, std::vector<v1::SearchTrial> trials,
                      int32_t best_trial = -1) {
  v1::Search search = MakeSearch();
  search.set_state(state);
  search.clear_trials();
  for (v1::SearchTrial& t : trials) *search.add_trials() = std::move(t);
  search.set_best_trial(best_trial);
  return search;
}

v1::SearchTrial WithState(v1::SearchTrial trial, v1::JobState state) {
  trial.set_state(state);
  return trial;
}

SearchFollowOptions FastFollow(int64_t search_id) {
  SearchFollowOptions options;
  options.search_id = search_id;
  options.poll_interval = absl::Milliseconds(1);
  options.progress_interval = absl::Hours(1);  // one status line, at the start
  return options;
}

TEST_F(SearchCommandsTest, FollowPrintsEachTrialChangeAndTheEndAndExitsZero) {
  const v1::SearchTrial t0_queued = WithState(
      MakeTrial(0, "0.0003", "0", "running", 0, 0, {11}, {}), v1::JOB_STATE_QUEUED);
  const v1::SearchTrial t0_running =
      MakeTrial(0, "0.0003", "0", "running", 0, 0, {11}, {});
  const v1::SearchTrial t0_paused =
      MakeTrial(0, "0.0003", "0", "paused", 0, 100, {11}, {0.61});
  const v1::SearchTrial t0_promoted =
      WithState(MakeTrial(0, "0.0003", "0", "running", 1, 100, {11, 13}, {0.61}),
                v1::JOB_STATE_QUEUED);
  const v1::SearchTrial t0_completed =
      MakeTrial(0, "0.0003", "0", "completed", 1, 300, {11, 13}, {0.61, 0.75});
  const v1::SearchTrial t1_running =
      MakeTrial(1, "0.002", "0.05", "running", 0, 0, {12}, {});
  const v1::SearchTrial t1_stopped =
      MakeTrial(1, "0.002", "0.05", "stopped", 0, 100, {12}, {0.5});
  v1::Search succeeded =
      SearchWith(v1::SEARCH_STATE_SUCCEEDED, {t0_completed, t1_stopped}, 0);
  succeeded.set_created_unix_ms(1714564800000);
  succeeded.set_updated_unix_ms(1714564800000 + 290000);
  service_.AddSearch(SearchWith(v1::SEARCH_STATE_RUNNING, {}));
  service_.ScriptSearch(
      4, {SearchWith(v1::SEARCH_STATE_RUNNING, {t0_queued}),
          SearchWith(v1::SEARCH_STATE_RUNNING, {t0_running, t1_running}),
          SearchWith(v1::SEARCH_STATE_RUNNING, {t0_paused, t1_running}, 0),
          SearchWith(v1::SEARCH_STATE_RUNNING, {t0_promoted, t1_stopped}, 0), succeeded});
  std::unique_ptr<CoordinatorClient> client = MakeClient();
  EXPECT_EQ(RunSearchFollow(FastFollow(4), *client, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre(
          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 0: job 11 QUEUED",
          "[00:00] search 4: 1/9 trials started, 1 running, 0 completed, 0 stopped, 0 "
          "failed",
          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 0: job 11 RUNNING",
          "[00:00] trial 1 (lr=0.002, weight_decay=0.05) rung 0: job 12 RUNNING",
          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 0: paused, val_accuracy "
          "0.61",
          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 1: promoted, job 13 QUEUED",
          "[00:00] trial 1 (lr=0.002, weight_decay=0.05) rung 0: stopped, val_accuracy "
          "0.5",
          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 1: completed, val_accuracy "
          "0.75",
          "search 4 SUCCEEDED in 4m50s: 2 trials; best trial 0: val_accuracy 0.75 at "
          "rung 1, step 300; see tessctl search report 4"));
  EXPECT_EQ(err_.str(), "");
}

TEST_F(SearchCommandsTest, FollowExitsOneWithTheReasonWhenTheSearchFailsOrIsCancelled) {
  v1::Search failed = SearchWith(v1::SEARCH_STATE_FAILED,
                                 {MakeTrial(2, "0.009", "0", "failed", 0, 0, {13}, {})});
  failed.set_reason("no trial reported val_accuracy");
  service_.AddSearch(failed);
  std::unique_ptr<CoordinatorClient> client = MakeClient();
  EXPECT_EQ(RunSearchFollow(FastFollow(4), *client, out_, err_), kExitFailed);
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre("[00:00] trial 2 (lr=0.009, weight_decay=0) rung 0: failed, job "
                  "13 FAILED",
                  "search 4 FAILED after 0s: no trial reported val_accuracy (1 "
                  "trial, 1 failed)"));

  v1::Search cancelled = MakeSearch();
  cancelled.set_id(5);
  cancelled.set_state(v1::SEARCH_STATE_CANCELLED);
  cancelled.set_reason("cancelled by ada");
  cancelled.set_created_unix_ms(1714564800000);
  cancelled.set_updated_unix_ms(1714564800000 + 151000);
  service_.AddSearch(cancelled);
  out_.str("");
  EXPECT_EQ(Cli({"search", "follow", "5"}), kExitFailed) << err_.str();
  EXPECT_EQ(Lines(out_.str()).back(),
            "search 5 CANCELLED after 2m31s: cancelled by ada (4 trials, 1 failed; best "
            "trial 1: val_accuracy 0.875 at rung 2, step 900)");
}

TEST_F(SearchCommandsTest, FollowWaitsOutTransientUnavailableUpToItsLimit) {
  service_.AddSearch(
      SearchWith(v1::SEARCH_STATE_SUCCEEDED,
                 {MakeTrial(0, "0.0003", "0", "completed", 0, 100, {11}, {0.61})}, 0));
  service_.FailNextGetSearches(2);
  std::unique_ptr<CoordinatorClient> client = MakeClient();
  SearchFollowOptions options = FastFollow(4);
  options.max_poll_failures = 3;
  EXPECT_EQ(RunSearchFollow(options, *client, out_, err_), kExitOk) << err_.str();
  EXPECT_EQ(Lines(out_.str()).back(),
            "search 4 SUCCEEDED in 0s: 1 trial; best trial 0: val_accuracy 0.61 at rung "
            "0, step 100; see tessctl search report 4");

  // One failure more than it tolerates ends it: the coordinator is unreachable.
  service_.FailNextGetSearches(3);
  out_.str("");
  EXPECT_EQ(RunSearchFollow(options, *client, out_, err_), kExitUnreachable);
  EXPECT_EQ(out_.str(), "");
  EXPECT_THAT(err_.str(), HasSubstr("coordinator restarting"));
}

TEST_F(SearchCommandsTest, FollowOnATerminalShowsTheRunningTrialsProgressInPlace) {
  v1::Job job;
  job.set_id(14);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  job.mutable_spec()->set_world_size(1);
  service_.AddJob(job);
  service_.AddPoint(1, 0, 10, "loss", 0.5);
  v1::Search failed =
      SearchWith(v1::SEARCH_STATE_FAILED,
                 {MakeTrial(3, "0.0001", "0.05", "failed", 0, 0, {14}, {})});
  failed.set_reason("no trial reported val_accuracy");
  service_.AddSearch(SearchWith(v1::SEARCH_STATE_RUNNING, {}));
  service_.ScriptSearch(
      4, {SearchWith(v1::SEARCH_STATE_RUNNING,
                     {MakeTrial(3, "0.0001", "0.05", "running", 0, 0, {14}, {})}),
          failed});
  std::unique_ptr<CoordinatorClient> client = MakeClient();
  SearchFollowOptions options = FastFollow(4);
  options.live = true;
  EXPECT_EQ(RunSearchFollow(options, *client, out_, err_), kExitFailed) << err_.str();
  EXPECT_EQ(out_.str(),
            "[00:00] trial 3 (lr=0.0001, weight_decay=0.05) rung 0: job 14 RUNNING\n"
            "\r[00:00] search 4: 1/9 trials started, 1 running, 0 completed, 0 stopped, "
            "0 failed; trial 3 job 14 RUNNING step 10  loss 0.5000\x1b[K"
            "\r\x1b[K[00:00] trial 3 (lr=0.0001, weight_decay=0.05) rung 0: failed, job "
            "14 FAILED\n"
            "search 4 FAILED after 0s: no trial reported val_accuracy (1 trial, 1 "
            "failed)\n");
}

TEST_F(SearchCommandsTest, FileWithFollowSubmitsThenFollowsTheSearch) {
  v1::Search done =
      SearchWith(v1::SEARCH_STATE_SUCCEEDED,
                 {MakeTrial(0, "0.0003", "0", "completed", 0, 400, {11}, {0.61})}, 0);
  done.set_id(1);
  service_.ScriptSearch(1, {done});
  ASSERT_EQ(Cli({"search", WriteFile("spec.yaml", kSpec), "--follow"}), kExitOk)
      << err_.str();
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("submitted search 1 (lr-study): random, 6 trials", "1",
                          "[00:00] trial 0 (lr=0.0003, weight_decay=0) rung 0: "
                          "completed, val_accuracy 0.61",
                          "search 1 SUCCEEDED in 0s: 1 trial; best trial 0: val_accuracy "
                          "0.61 at rung 0, step 100; see tessctl search report 1"));

  done.set_id(2);
  done.set_state(v1::SEARCH_STATE_FAILED);
  service_.ScriptSearch(2, {done});
  EXPECT_EQ(Cli({"search", "submit", WriteFile("spec.yaml", kSpec), "--follow"}),
            kExitFailed)
      << err_.str();
  EXPECT_EQ(Lines(out_.str())[1], "2");
  EXPECT_THAT(Lines(out_.str()).back(), ::testing::StartsWith("search 2 FAILED after"));
  EXPECT_EQ(service_.search_submits().size(), 2u);
}

// A job of trial 1 of search 4, as the coordinator answers it to `export`.
v1::Job TrialJob(int64_t id, int rung) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->set_name(absl::StrCat("lr-study/t1-r", rung));
  v1::TrainerConfig* trainer = job.mutable_spec()->mutable_trainer();
  trainer->set_model("vit-micro");
  trainer->set_dataset("synthetic");
  trainer->set_image_size(28);
  trainer->set_checkpoint_dir("/ckpt/search-4/trial-1");
  return job;
}

// A stand-in for tessera-export that writes its arguments to `args_file`
// and exits with `exit_code` (1: as the real one does for a step that the
// checkpoint directory holds no checkpoint of).
std::string ExporterScript(const std::string& args_file, int exit_code) {
  return absl::StrCat("#!/bin/sh\necho \"$@\" > ", args_file, "\nexit ", exit_code, "\n");
}

// `search best --export` is `tessctl export` of the checkpoint that scored
// best: the step of the best rung, from that rung's job; the exporter reads
// the trial's own checkpoint folder.
TEST_F(SearchCommandsTest, BestExportRunsTheExporterOnTheCheckpointThatScoredBest) {
  service_.AddJob(TrialJob(16, 2));
  service_.AddSearch(MakeSearch());
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile("exporter.sh", ExporterScript(args_file, 0));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);

  ASSERT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "--names", "timm",
                 "--exporter", exporter}),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("best trial 1 of search 4"));
  EXPECT_THAT(
      out_.str(),
      HasSubstr("tessctl export: job 16 (vit-micro) from /ckpt/search-4/trial-1"));
  EXPECT_EQ(err_.str(), "");
  const std::string args = ReadText(args_file);
  EXPECT_THAT(args, HasSubstr("--checkpoint /ckpt/search-4/trial-1"));
  EXPECT_THAT(args, HasSubstr("--step 900"));
  EXPECT_THAT(args, HasSubstr("--names timm"));
  EXPECT_THAT(args, HasSubstr("-o best.safetensors"));
}

// Trial 1 scored best at rung 1 (job 15, step 300), worse at rung 2: the
// export asks for job 15 and its step 300, not the trial's newest checkpoint.
TEST_F(SearchCommandsTest, BestExportTakesTheBestRungsCheckpointNotTheNewest) {
  service_.AddJob(TrialJob(15, 1));
  service_.AddJob(TrialJob(16, 2));
  v1::Search search = MakeSearch();
  *search.mutable_trials(1) = MakeTrial(1, "0.002", "0.05", "completed", 2, 900,
                                        {12, 15, 16}, {0.7, 0.8125, 0.79});
  service_.AddSearch(search);
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile("exporter.sh", ExporterScript(args_file, 0));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);

  ASSERT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "--exporter",
                 exporter}),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("best trial 1 of search 4: val_accuracy 0.8125 at "
                                    "rung 1, step 300, job 15 (completed; latest rung "
                                    "2, job 16)\n"));
  EXPECT_THAT(
      out_.str(),
      HasSubstr("tessctl export: job 15 (vit-micro) from /ckpt/search-4/trial-1"));
  EXPECT_EQ(service_.get_job_calls(), 1);
  EXPECT_THAT(ReadText(args_file), HasSubstr("--step 300"));
  EXPECT_EQ(err_.str(),
            "tessctl: trial 1 scored best at rung 1 (job 15, step 300); its latest rung "
            "2 (job 16) did not score better: exporting the checkpoint of step 300\n");
}

TEST_F(SearchCommandsTest, BestExportOfATrialStillTrainingTakesItsBestCheckpoint) {
  service_.AddJob(TrialJob(15, 1));
  service_.AddJob(TrialJob(16, 2));
  v1::Search search = MakeSearch();
  *search.mutable_trials(1) =
      MakeTrial(1, "0.002", "0.05", "running", 2, 300, {12, 15, 16}, {0.7, 0.8125});
  service_.AddSearch(search);
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile("exporter.sh", ExporterScript(args_file, 0));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);

  ASSERT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "-o", "json",
                 "--exporter", exporter}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str())["best_step"], 300);
  EXPECT_THAT(ReadText(args_file), HasSubstr("--step 300"));
  EXPECT_THAT(err_.str(), HasSubstr("tessctl: trial 1 scored best at rung 1 (job 15, "
                                    "step 300) and is still training rung 2: exporting "
                                    "the checkpoint of step 300\n"));
  EXPECT_THAT(err_.str(), HasSubstr("tessctl export: job 15 (vit-micro)"));
}

// Where that checkpoint is gone (pruned before rungs' checkpoints were kept),
// nothing else is exported in its place: the message names the step and the
// command that exports the newest one.
TEST_F(SearchCommandsTest, BestExportOfAGoneCheckpointFailsSayingHowToExportTheNewest) {
  service_.AddJob(TrialJob(15, 1));
  v1::Search search = MakeSearch();
  *search.mutable_trials(1) = MakeTrial(1, "0.002", "0.05", "completed", 2, 900,
                                        {12, 15, 16}, {0.7, 0.8125, 0.79});
  service_.AddSearch(search);
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile("exporter.sh", ExporterScript(args_file, 1));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);

  EXPECT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "--exporter",
                 exporter}),
            kExitFailed);
  EXPECT_THAT(ReadText(args_file), HasSubstr("--step 300"));
  EXPECT_THAT(err_.str(), HasSubstr("tessctl: the checkpoint of step 300 (job 15, where "
                                    "trial 1 scored best) was not exported; if it is "
                                    "gone, `tessctl export 16 -o best.safetensors` "
                                    "exports the trial's newest checkpoint instead\n"));
}

// A coordinator that predates best_step: the newest checkpoint is exported
// only where the latest rung scored the best; otherwise the export fails.
TEST_F(SearchCommandsTest, BestExportWithoutBestStepExportsTheNewestOnlyIfItScoredBest) {
  service_.AddJob(TrialJob(16, 2));
  v1::Search search = MakeSearch();
  for (v1::SearchTrial& t : *search.mutable_trials()) {
    t.clear_best_rung();
    t.clear_best_job_id();
    t.clear_best_step();
  }
  service_.AddSearch(search);
  const std::string args_file = WriteFile("args.txt", "");
  const std::string exporter = WriteFile("exporter.sh", ExporterScript(args_file, 0));
  ASSERT_EQ(chmod(exporter.c_str(), 0755), 0);
  ASSERT_EQ(Cli({"search", "best", "4", "--export", "best.safetensors", "--exporter",
                 exporter}),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("tessctl export: job 16"));
  EXPECT_THAT(ReadText(args_file), Not(HasSubstr("--step")));

  search.set_id(5);
  search.mutable_trials(1)->set_rung_metrics(2, 0.79);
  search.mutable_trials(1)->set_best_metric(0.8125);
  service_.AddSearch(search);
  EXPECT_EQ(Cli({"search", "best", "5", "--export", "best.safetensors", "--exporter",
                 exporter}),
            kExitFailed);
  EXPECT_EQ(err_.str(),
            "tessctl: the coordinator does not say at which step trial 1 scored best (it "
            "predates best_step); `tessctl export 16 -o best.safetensors` exports the "
            "trial's newest checkpoint\n");
}

}  // namespace
}  // namespace tessera::cli
