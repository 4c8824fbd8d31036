// tessctl against a fake JobService served in-process (fake_job_service.h):
// commands, exit codes, retries, argument parsing, --token metadata, output
// formats, progress lines, sweeps and shell completion.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/app.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "cli/sweep_commands.h"
#include "cli/sweep_output.h"
#include "common/job_spec.h"
#include "common/sweep_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/cli/fake_job_service.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ExampleFile(const std::string& name) {
  std::filesystem::path root;
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) {
    root = dir;
  } else {
    root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  }
  return ReadFile(root / "examples" / name);
}

std::string ExampleSpec() { return ExampleFile("fmnist-2rank.yaml"); }

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

using fakes::FakeJobService;

v1::Job MakeJob(int64_t id, const std::string& name, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_name(name);
  job.set_state(state);
  job.mutable_spec()->set_name(name);
  job.mutable_spec()->set_world_size(2);
  job.mutable_spec()->mutable_trainer()->set_model("vit-micro");
  job.mutable_spec()->mutable_trainer()->set_batch_size(64);
  job.set_created_unix_ms(1714564800000);
  job.set_updated_unix_ms(1714564800000 + 151000);  // 2m31s later
  return job;
}

v1::RankStatus* AddRank(v1::Job& job, int rank, bool with_result, double accuracy) {
  v1::RankStatus* r = job.add_ranks();
  r->set_rank(rank);
  r->set_worker(absl::StrCat("node-", rank));
  r->set_slot(rank);
  r->set_state("exited");
  r->set_pid(4000 + rank);
  r->set_has_result(with_result);
  if (with_result) {
    r->set_param_hash("9f1c2a");
    r->set_test_accuracy(accuracy);
  }
  return r;
}

class TessctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    client_ = MakeClient();
  }

  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<CoordinatorClient> MakeClient(const std::string& token = "") {
    return std::make_unique<CoordinatorClient>(
        channel_,
        CoordinatorClient::Options{
            .rpc_timeout = absl::Seconds(10), .target = "in-process", .token = token});
  }

  std::string WriteSpec(const std::string& text) {
    const std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) /
        absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                     spec_counter_++, ".yaml");
    std::ofstream(path) << text;
    return path.string();
  }

  SubmitOptions Submit(const std::string& path) {
    SubmitOptions options;
    options.spec_path = path;
    options.initial_backoff = absl::Milliseconds(1);
    return options;
  }

  WaitOptions Wait(int64_t job_id) {
    WaitOptions options;
    options.job_id = job_id;
    options.poll_interval = absl::Milliseconds(1);
    options.progress_interval = absl::ZeroDuration();
    return options;
  }

  // Runs the whole command line against the fake; records the address used.
  int Cli(const std::vector<std::string>& args, const Terminal& terminal = {}) {
    return RunTessctl(
        args,
        [this](const ConnectionOptions& connection) {
          addresses_.push_back(connection.address);
          tokens_.push_back(connection.token);
          tls_.push_back(connection.tls_ca_file + "|" + connection.tls_pin);
          return MakeClient(connection.token);
        },
        out_, err_, terminal);
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<CoordinatorClient> client_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::vector<std::string> addresses_;
  std::vector<std::string> tokens_;
  std::vector<std::string> tls_;  // "ca_file|pin" per connection
  int spec_counter_ = 0;
};

// ---- submit ----

TEST_F(TessctlTest, SubmitPrintsJobIdAloneOnLastLineAndSendsParsedSpec) {
  const std::string text = ExampleSpec();
  ASSERT_FALSE(text.empty());
  const std::string path = WriteSpec(text);

  ASSERT_EQ(RunSubmit(Submit(path), *client_, out_, err_), kExitOk) << err_.str();

  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "1");
  EXPECT_THAT(out_.str(), HasSubstr("submitted job 1 (fmnist-vit-micro)"));

  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  absl::StatusOr<v1::JobSpec> expected = ParseAndValidateJobSpec(text, SpecLimits{});
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(submits[0].spec(), *expected))
      << submits[0].spec().DebugString();
  EXPECT_EQ(submits[0].spec_yaml(), text);
  EXPECT_THAT(submits[0].client_request_id(), ::testing::MatchesRegex("[0-9a-f]{32}"));
}

TEST_F(TessctlTest, SubmitOfInvalidSpecExitsTwoAndSendsNothing) {
  const std::string path = WriteSpec(
      "name: bad\nworld_size: 0\ntrainer:\n  model: m\n  dataset: d\n"
      "  batch_size: -4\n  epochs: 1\n");
  EXPECT_EQ(RunSubmit(Submit(path), *client_, out_, err_), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("world_size: must be between 1 and 1024, got 0"));
  EXPECT_THAT(err_.str(), HasSubstr("trainer.batch_size: must be positive, got -4"));
  EXPECT_EQ(out_.str(), "");
  EXPECT_TRUE(service_.submits().empty());
}

TEST_F(TessctlTest, SubmitOfMissingFileExitsTwo) {
  EXPECT_EQ(RunSubmit(Submit("/nonexistent/spec.yaml"), *client_, out_, err_),
            kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("cannot read spec file '/nonexistent/spec.yaml'"));
  EXPECT_TRUE(service_.submits().empty());
}

TEST_F(TessctlTest, SubmitOverrideReachesTheServer) {
  SubmitOptions options = Submit(WriteSpec(ExampleSpec()));
  options.overrides = {"trainer.batch_size=32", "trainer.weight_decay=0.05"};
  ASSERT_EQ(RunSubmit(options, *client_, out_, err_), kExitOk) << err_.str();

  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].spec().trainer().batch_size(), 32);
  EXPECT_DOUBLE_EQ(submits[0].spec().trainer().weight_decay(), 0.05);
  EXPECT_EQ(submits[0].spec().trainer().model(), "vit-micro");
  // The recorded text is what was validated, overrides included.
  absl::StatusOr<v1::JobSpec> recorded = ParseJobSpec(submits[0].spec_yaml());
  ASSERT_TRUE(recorded.ok());
  EXPECT_EQ(recorded->trainer().batch_size(), 32);
}

TEST_F(TessctlTest, SubmitWithMalformedOverrideExitsTwo) {
  SubmitOptions options = Submit(WriteSpec(ExampleSpec()));
  options.overrides = {"trainer.batch_size"};
  EXPECT_EQ(RunSubmit(options, *client_, out_, err_), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("override 'trainer.batch_size': expected key=value"));
  EXPECT_TRUE(service_.submits().empty());
}

TEST_F(TessctlTest, RetriedSubmitReusesTheClientRequestId) {
  service_.FailNextSubmits(1);
  ASSERT_EQ(RunSubmit(Submit(WriteSpec(ExampleSpec())), *client_, out_, err_), kExitOk)
      << err_.str();

  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_FALSE(submits[0].client_request_id().empty());
  EXPECT_EQ(submits[0].client_request_id(), submits[1].client_request_id());
  EXPECT_EQ(Lines(out_.str()).back(), "1");
  EXPECT_THAT(err_.str(), HasSubstr("retrying"));
}

TEST_F(TessctlTest, SeparateSubmitsUseDistinctRequestIds) {
  const std::string path = WriteSpec(ExampleSpec());
  ASSERT_EQ(RunSubmit(Submit(path), *client_, out_, err_), kExitOk);
  ASSERT_EQ(RunSubmit(Submit(path), *client_, out_, err_), kExitOk);
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_NE(submits[0].client_request_id(), submits[1].client_request_id());
  EXPECT_EQ(Lines(out_.str()).back(), "2");
}

TEST_F(TessctlTest, SubmitGivesUpAfterMaxAttemptsWithUnreachableCode) {
  service_.FailNextSubmits(100);
  SubmitOptions options = Submit(WriteSpec(ExampleSpec()));
  options.max_attempts = 3;
  EXPECT_EQ(RunSubmit(options, *client_, out_, err_), kExitUnreachable);
  EXPECT_EQ(service_.submits().size(), 3u);
  EXPECT_THAT(err_.str(), HasSubstr("cannot reach the coordinator at in-process"));
  EXPECT_EQ(out_.str(), "");
}

// ---- status ----

TEST_F(TessctlTest, StatusJsonHasTopLevelStateAndRanks) {
  v1::Job job = MakeJob(7, "demo", v1::JOB_STATE_SUCCEEDED);
  job.set_attempt(1);
  job.set_spec_yaml("name: demo\n");
  AddRank(job, 0, true, 0.8412);
  AddRank(job, 1, false, 0);
  service_.AddJob(job);

  ASSERT_EQ(RunStatus({.job_id = 7, .format = OutputFormat::kJson}, *client_, out_, err_),
            kExitOk)
      << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["state"], "SUCCEEDED");
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["name"], "demo");
  EXPECT_EQ(j["attempt"], 1);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["created_unix_ms"], 1714564800000);
  EXPECT_EQ(j["created"], "2024-05-01T12:00:00+00:00");
  EXPECT_EQ(j["spec_yaml"], "name: demo\n");
  EXPECT_EQ(j["spec"]["trainer"]["batch_size"], 64);
  EXPECT_EQ(j["spec"]["trainer"]["model"], "vit-micro");
  EXPECT_FALSE(j["spec"]["trainer"].contains("allreduce"));  // unset optional
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["worker"], "node-0");
  EXPECT_DOUBLE_EQ(j["ranks"][0]["test_accuracy"].get<double>(), 0.8412);
  EXPECT_TRUE(j["ranks"][1]["test_accuracy"].is_null());
}

TEST_F(TessctlTest, CancelRecordsCancelledAndRefusesFinishedJobs) {
  service_.AddJob(MakeJob(3, "running", v1::JOB_STATE_RUNNING));
  service_.AddJob(MakeJob(4, "done", v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(RunCancel({.job_id = 3}, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("job 3 CANCELLED"));
  EXPECT_EQ(RunCancel({.job_id = 4}, *client_, out_, err_), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("already ended"));
  EXPECT_EQ(RunCancel({.job_id = 99}, *client_, out_, err_), kExitNotFound);
}

TEST_F(TessctlTest, LogsFollowPrintsTheWholeLogUntilComplete) {
  service_.AddJob(MakeJob(5, "logged", v1::JOB_STATE_SUCCEEDED));
  service_.SetLog("step 10 loss 0.5\nstep 20 loss 0.4\n");
  LogsOptions options{
      .job_id = 5, .rank = 0, .follow = true, .poll_interval = absl::Milliseconds(1)};
  EXPECT_EQ(RunLogs(options, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "step 10 loss 0.5\nstep 20 loss 0.4\n");
}

TEST_F(TessctlTest, StatusShowsTransitionsAndExitReasons) {
  v1::Job job = MakeJob(8, "failing", v1::JOB_STATE_FAILED);
  job.set_attempt(1);
  AddRank(job, 0, false, 0);
  job.mutable_ranks(0)->set_exit_reason(
      "worker node-0 declared dead (no heartbeat for 16s)");
  v1::JobEvent* queued = job.add_events();
  queued->set_unix_ms(1714564800000);
  queued->set_to_state(v1::JOB_STATE_QUEUED);
  queued->set_reason("submitted");
  v1::JobEvent* failed = job.add_events();
  failed->set_unix_ms(1714564860000);
  failed->set_from_state(v1::JOB_STATE_QUEUED);
  failed->set_to_state(v1::JOB_STATE_FAILED);
  failed->set_reason("rank 0 lost");
  service_.AddJob(job);

  ASSERT_EQ(RunStatus({.job_id = 8, .format = OutputFormat::kJson}, *client_, out_, err_),
            kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_TRUE(j["events"][0]["from"].is_null());
  EXPECT_EQ(j["events"][1]["from"], "QUEUED");
  EXPECT_EQ(j["events"][1]["to"], "FAILED");
  EXPECT_EQ(j["events"][1]["reason"], "rank 0 lost");
  EXPECT_EQ(j["ranks"][0]["exit_reason"],
            "worker node-0 declared dead (no heartbeat for 16s)");

  out_.str("");
  ASSERT_EQ(
      RunStatus({.job_id = 8, .format = OutputFormat::kTable}, *client_, out_, err_),
      kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("declared dead"));
  EXPECT_THAT(out_.str(), HasSubstr("rank 0 lost"));
}

TEST_F(TessctlTest, StatusTableShowsFieldsAndRankRows) {
  v1::Job job = MakeJob(7, "demo", v1::JOB_STATE_FAILED);
  job.set_reason("rank 1 exited with code 3");
  AddRank(job, 0, true, 0.8412);
  v1::RankStatus* failed = AddRank(job, 1, false, 0);
  failed->set_exit_code(3);
  service_.AddJob(job);

  ASSERT_EQ(RunStatus({.job_id = 7}, *client_, out_, err_), kExitOk) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("FAILED"));
  EXPECT_THAT(out, HasSubstr("rank 1 exited with code 3"));
  EXPECT_THAT(out, HasSubstr("--model=vit-micro --batch-size=64"));
  EXPECT_THAT(out, HasSubstr("RANK  WORKER  SLOT  STATE   STEP  PHASE  PID   EXIT  "
                             "PARAM_HASH  TEST_ACCURACY"));
  EXPECT_THAT(out,
              HasSubstr("0     node-0  0     exited  -     -      4000  0     9f1c2a "
                        "     84.12%"));
  EXPECT_THAT(out,
              HasSubstr("1     node-1  1     exited  -     -      4001  3     -      "
                        "     -"));
}

TEST_F(TessctlTest, StatusShowsEachRanksStepPhaseAndTheStragglers) {
  v1::Job job = MakeJob(9, "slow", v1::JOB_STATE_RUNNING);
  v1::RankStatus* r0 = AddRank(job, 0, false, 0);
  r0->set_state("running");
  r0->mutable_progress()->set_step(412);
  r0->mutable_progress()->set_phase("collective");
  r0->mutable_progress()->set_collective("allreduce #830 (bucket 3)");
  r0->mutable_progress()->set_phase_elapsed_ms(11000);
  r0->set_progress_age_ms(1000);
  v1::RankStatus* r1 = AddRank(job, 1, false, 0);
  r1->set_state("running");
  r1->mutable_progress()->set_step(412);
  r1->mutable_progress()->set_phase("forward");
  r1->set_progress_age_ms(9000);
  r1->set_straggler(true);
  job.add_stragglers("rank 1 on node-1: 1.9x the median step work of its peers");
  job.set_preemptions(1);
  job.set_attempt(2);
  service_.AddJob(job);
  ASSERT_EQ(RunStatus({.job_id = 9}, *client_, out_, err_), kExitOk) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "STRAGGLER +rank 1 on node-1: 1.9x the median step work"));
  EXPECT_THAT(out, HasSubstr("2 (1 preempted, not counted as restarts)"));
  EXPECT_THAT(out, HasSubstr("412   collective allreduce #830 (bucket 3) 12s"));
  EXPECT_THAT(out, HasSubstr("412   forward 9s (silent 9s) STRAGGLER"));
}

TEST_F(TessctlTest, StatusShowsEachRanksNewestDeviceMemoryOfTheCurrentAttempt) {
  v1::Job job = MakeJob(9, "big", v1::JOB_STATE_RUNNING);
  job.set_attempt(2);
  AddRank(job, 0, false, 0)->set_state("running");
  AddRank(job, 1, false, 0)->set_state("running");
  AddRank(job, 2, false, 0)->set_state("running");  // has reported nothing yet
  service_.AddJob(job);
  const double gib = 1024.0 * 1024 * 1024;
  service_.AddPoint(1, 0, 50, "cuda_peak_allocated_bytes", 9 * gib);  // attempt 1
  for (int rank = 0; rank < 2; ++rank) {
    service_.AddPoint(2, rank, 100, "cuda_allocated_bytes", 1 * gib);
    service_.AddPoint(2, rank, 100, "cuda_peak_allocated_bytes", 3 * gib);
  }
  for (int rank = 0; rank < 2; ++rank) {
    service_.AddPoint(2, rank, 200, "cuda_allocated_bytes", 1.25 * gib + rank * gib);
    service_.AddPoint(2, rank, 200, "cuda_peak_allocated_bytes", 3.5 * gib);
    service_.AddPoint(2, rank, 200, "cuda_reserved_bytes", 4 * gib);
    service_.AddPoint(2, rank, 200, "gpu_memory_used_bytes", 5.5 * gib);
  }
  ASSERT_EQ(RunStatus({.job_id = 9}, *client_, out_, err_), kExitOk) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("RANK  MEMORY\n"
                             "0     allocated 1.2 GiB, peak 3.5 GiB, reserved 4.0 GiB, "
                             "GPU used 5.5 GiB\n"
                             "1     allocated 2.2 GiB, peak 3.5 GiB, reserved 4.0 GiB, "
                             "GPU used 5.5 GiB\n"));
  EXPECT_THAT(out, Not(HasSubstr("9.0 GiB")));
  EXPECT_THAT(out, Not(HasSubstr("\n2     allocated")));
}

TEST_F(TessctlTest, StatusOfAJobWithoutMemoryFiguresHasNoMemoryLines) {
  v1::Job job = MakeJob(9, "cpu", v1::JOB_STATE_RUNNING);
  AddRank(job, 0, false, 0)->set_state("running");
  service_.AddJob(job);
  ASSERT_EQ(RunStatus({.job_id = 9}, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), Not(HasSubstr("MEMORY")));
}

TEST_F(TessctlTest, StatusShowsWhoseJobItIs) {
  v1::Job job = MakeJob(8, "owned", v1::JOB_STATE_RUNNING);
  job.set_owner("alice");
  service_.AddJob(job);
  ASSERT_EQ(RunStatus({.job_id = 8}, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("OWNER +alice"));
  out_.str("");
  ASSERT_EQ(Cli({"status", "8", "-o", "json"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\"owner\": \"alice\""));
}

TEST_F(TessctlTest, StatusOfUnknownJobExitsThreeWithMessage) {
  EXPECT_EQ(RunStatus({.job_id = 42}, *client_, out_, err_), kExitNotFound);
  EXPECT_EQ(err_.str(), "tessctl: job 42 not found\n");
  EXPECT_EQ(out_.str(), "");
}

// ---- jobs and workers ----

TEST_F(TessctlTest, JobsTableAlignsColumnsAndShowsPendingReason) {
  v1::Job queued = MakeJob(2, "second-job", v1::JOB_STATE_QUEUED);
  queued.set_pending_reason("needs 2 free slots, 1 available");
  service_.AddJob(MakeJob(1, "a", v1::JOB_STATE_RUNNING));
  service_.AddJob(queued);

  ASSERT_EQ(RunJobs({}, *client_, out_, err_), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("ID  NAME        STATE    WORLD  ATTEMPT  AGE"));
  EXPECT_THAT(lines[1], StartsWith("2   second-job  QUEUED   2      0        "));
  EXPECT_THAT(lines[1], HasSubstr("needs 2 free slots, 1 available"));
  EXPECT_THAT(lines[2], StartsWith("1   a           RUNNING  2      0        "));
  // Every row's REASON starts where the header's does.
  const size_t reason_col = lines[0].find("REASON");
  EXPECT_EQ(lines[1].find("needs"), reason_col);
  EXPECT_EQ(lines[2].substr(reason_col), "-");
}

TEST_F(TessctlTest, JobsJsonIsAnArrayOfJobs) {
  service_.AddJob(MakeJob(1, "a", v1::JOB_STATE_CANCELLED));
  service_.AddJob(MakeJob(2, "b", v1::JOB_STATE_RUNNING));
  ASSERT_EQ(RunJobs({.format = OutputFormat::kJson}, *client_, out_, err_), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["id"], 2);
  EXPECT_EQ(j[0]["state"], "RUNNING");
  EXPECT_EQ(j[1]["state"], "CANCELLED");
}

TEST_F(TessctlTest, WorkersTableListsSlotsAndLiveness) {
  v1::Worker w;
  w.set_name("node-a");
  w.set_hostname("node-a.lan");
  w.set_device_kind("cpu");
  w.set_slots(4);
  w.set_slots_used(2);
  w.set_alive(true);
  service_.AddWorker(w);
  ASSERT_EQ(RunWorkers({}, *client_, out_, err_), kExitOk);
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "NAME    HOST        KIND  SLOTS  GPUS  USED  ALIVE  STATE  POOL  LAST-SEEN");
  EXPECT_EQ(lines[1],
            "node-a  node-a.lan  cpu   4      -     2     yes    ok     -     -");
}

TEST_F(TessctlTest, WorkersShowTheGpusEachWorkerOwns) {
  v1::Worker w;
  w.set_name("gpu-a");
  w.set_device_kind("cuda");
  w.set_slots(2);
  w.add_gpu_ids("2");
  w.add_gpu_ids("3");
  service_.AddWorker(w);
  ASSERT_EQ(RunWorkers({}, *client_, out_, err_), kExitOk);
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].substr(lines[0].find("GPUS"), 4), "2,3 ") << out_.str();

  out_.str("");
  ASSERT_EQ(RunWorkers({.format = OutputFormat::kJson}, *client_, out_, err_), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j[0]["gpu_ids"], nlohmann::json({"2", "3"}));

  out_.str("");
  ASSERT_EQ(RunWorkers({.format = OutputFormat::kCsv}, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr(",\"2,3\"\n"));
}

TEST_F(TessctlTest, WorkersTableShowsDrainStateAndSlurmPool) {
  v1::Worker a;
  a.set_name("a");
  a.set_slots(2);
  a.set_slots_used(1);
  a.set_draining(true);
  service_.AddWorker(a);
  v1::Worker b;
  b.set_name("b");
  b.set_slots(2);
  b.set_draining(true);
  b.set_drained(true);
  b.set_pool("gpu-a");
  b.set_slurm_job_id("1234");
  service_.AddWorker(b);
  ASSERT_EQ(RunWorkers({}, *client_, out_, err_), kExitOk);
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("no     draining  -"));
  EXPECT_THAT(out, HasSubstr("no     drained   gpu-a (slurm 1234)"));
}

// ---- wait ----

TEST_F(TessctlTest, WaitExitsZeroWhenJobSucceedsAndPrintsAccuracy) {
  v1::Job job = MakeJob(1, "demo", v1::JOB_STATE_RUNNING);
  AddRank(job, 0, true, 0.8412);
  AddRank(job, 1, true, 0.8412);
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING,
                            v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED});

  EXPECT_EQ(RunWait(Wait(1), *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job 1 SUCCEEDED in 2m31s: test accuracy 84.12%\n");
  EXPECT_EQ(service_.get_job_calls(), 4);
}

TEST_F(TessctlTest, WaitOnAnEvaluationNamesTheSplitItScored) {
  v1::Job job = MakeJob(1, "pets-eval", v1::JOB_STATE_RUNNING);
  job.mutable_spec()->set_kind("eval");
  job.mutable_spec()->mutable_trainer()->set_eval_split("val");
  AddRank(job, 0, true, 0.493);
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED});

  EXPECT_EQ(RunWait(Wait(1), *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr(": val accuracy 49.30%\n"));
}

TEST_F(TessctlTest, WaitExitsOneWhenJobFailsAndPrintsReason) {
  v1::Job job = MakeJob(1, "demo", v1::JOB_STATE_RUNNING);
  job.set_reason("rank 1 exited with code 3");
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED});

  EXPECT_EQ(RunWait(Wait(1), *client_, out_, err_), kExitFailed);
  EXPECT_EQ(out_.str(), "job 1 FAILED after 2m31s: rank 1 exited with code 3\n");
}

TEST_F(TessctlTest, WaitExitsOneWhenJobIsCancelled) {
  service_.AddJob(MakeJob(1, "demo", v1::JOB_STATE_CANCELLED));
  EXPECT_EQ(RunWait(Wait(1), *client_, out_, err_), kExitFailed);
  EXPECT_THAT(out_.str(), HasSubstr("job 1 CANCELLED"));
}

TEST_F(TessctlTest, WaitTimesOutWithExitCode124) {
  service_.AddJob(MakeJob(1, "demo", v1::JOB_STATE_RUNNING));
  WaitOptions options = Wait(1);
  options.timeout = absl::Milliseconds(50);
  EXPECT_EQ(RunWait(options, *client_, out_, err_), kExitTimeout);
  EXPECT_THAT(err_.str(), HasSubstr("timed out"));
  EXPECT_THAT(err_.str(), HasSubstr("(RUNNING)"));
}

TEST_F(TessctlTest, WaitOnUnknownJobExitsThree) {
  EXPECT_EQ(RunWait(Wait(9), *client_, out_, err_), kExitNotFound);
  EXPECT_EQ(err_.str(), "tessctl: job 9 not found\n");
}

TEST_F(TessctlTest, WaitProgressShowsStepOfTotalMeanLossSummedThroughputAndEta) {
  v1::Job job = MakeJob(1, "demo", v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  job.mutable_spec()->mutable_trainer()->set_epochs(3);
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED});
  constexpr int64_t kT0 = 1714564800000;
  service_.AddPoint(1, 0, 0, "total_steps", 100, kT0);
  service_.AddPoint(1, 0, 10, "loss", 2.0, kT0 + 10'000);
  service_.AddPoint(1, 1, 10, "loss", 2.2, kT0 + 10'000);
  service_.AddPoint(1, 0, 20, "epoch", 0.6, kT0 + 20'000);
  service_.AddPoint(1, 0, 20, "images_per_sec", 100.0, kT0 + 20'000);
  service_.AddPoint(1, 0, 20, "loss", 0.5, kT0 + 20'000);
  service_.AddPoint(1, 1, 20, "images_per_sec", 53.2, kT0 + 20'000);
  service_.AddPoint(1, 1, 20, "loss", 0.7, kT0 + 20'000);
  service_.AddPoint(1, 0, 20, "test_accuracy", 0.81, kT0 + 20'000);
  service_.AddPoint(1, 1, 20, "test_accuracy", 0.83, kT0 + 20'000);

  WaitOptions options = Wait(1);
  options.progress = true;
  EXPECT_EQ(RunWait(options, *client_, out_, err_), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  // 10 steps in 10 s, 80 to go.
  EXPECT_EQ(lines[0],
            "[00:00] RUNNING epoch 0.60/3  step 20/100 (20%)  loss 0.6000  153.2 img/s  "
            "ETA 1m20s");
  // No rank result: the accuracy comes from the newest test_accuracy points.
  EXPECT_EQ(lines[1], "job 1 SUCCEEDED in 2m31s: test accuracy 82.00%");
}

TEST_F(TessctlTest, WaitProgressOnATerminalRedrawsOneLineInPlace) {
  v1::Job job = MakeJob(1, "demo", v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_RUNNING, v1::JOB_STATE_RUNNING,
                            v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED});
  service_.AddPoint(1, 0, 10, "loss", 0.5);
  service_.AddPoint(1, 1, 10, "loss", 0.7);

  WaitOptions options = Wait(1);
  options.progress = true;
  options.live = true;
  options.columns = 80;
  options.progress_interval = absl::Hours(1);  // live lines do not wait for it
  EXPECT_EQ(RunWait(options, *client_, out_, err_), kExitOk) << err_.str();
  const std::string redraw = "\r[00:00] RUNNING step 10  loss 0.6000\x1b[K";
  EXPECT_EQ(out_.str(),
            absl::StrCat(redraw, redraw, redraw, "\njob 1 SUCCEEDED in 2m31s\n"));
}

TEST_F(TessctlTest, SubmitFollowWaitsForTheJobAndExitsWithItsResult) {
  SubmitOptions options = Submit(WriteSpec(ExampleSpec()));
  options.follow = true;
  options.follow_options.poll_interval = absl::Milliseconds(1);
  options.follow_options.progress = true;
  options.follow_options.progress_interval = absl::ZeroDuration();
  service_.ScriptStates(1, {v1::JOB_STATE_QUEUED, v1::JOB_STATE_FAILED});
  EXPECT_EQ(RunSubmit(options, *client_, out_, err_), kExitFailed) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_EQ(lines[0], "submitted job 1 (fmnist-vit-micro)");
  EXPECT_EQ(lines[1], "1");
  EXPECT_EQ(lines[2], "[00:00] QUEUED");
  EXPECT_THAT(lines[3], StartsWith("job 1 FAILED after "));

  out_.str("");
  service_.ScriptStates(2, {v1::JOB_STATE_SUCCEEDED});
  EXPECT_EQ(RunSubmit(options, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(Lines(out_.str()).back(), StartsWith("job 2 SUCCEEDED in "));
}

// ---- metrics ----

TEST_F(TessctlTest, MetricsPagesThroughEveryStoredPoint) {
  service_.AddJob(MakeJob(1, "demo", v1::JOB_STATE_RUNNING));
  constexpr int kSteps = 4000;  // 2 ranks x 2 names x 4000 steps = 16000 points
  for (int step = 1; step <= kSteps; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      service_.AddPoint(1, rank, step, "images_per_sec", 100 + rank);
      service_.AddPoint(1, rank, step, "loss", 1.0 / step);
    }
  }
  absl::StatusOr<std::vector<v1::MetricPoint>> points = FetchMetrics(*client_, 1, -1, "");
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 4u * kSteps);
  for (size_t i = 1; i < points->size(); ++i) {
    const v1::MetricPoint& a = (*points)[i - 1];
    const v1::MetricPoint& b = (*points)[i];
    ASSERT_TRUE(std::make_tuple(a.step(), a.rank(), a.name()) <
                std::make_tuple(b.step(), b.rank(), b.name()))
        << "duplicate or out of order at " << i;
  }
  EXPECT_GE(service_.metrics_requests().size(), 2u);
}

TEST_F(TessctlTest, MetricsCsvHasHeaderAndExactValues) {
  service_.AddJob(MakeJob(1, "demo", v1::JOB_STATE_RUNNING));
  service_.AddPoint(1, 0, 10, "loss", 0.1);
  service_.AddPoint(1, 0, 10, "images_per_sec", 77.5);
  ASSERT_EQ(RunMetrics({.job_id = 1, .format = OutputFormat::kCsv, .name = "loss"},
                       *client_, out_, err_),
            kExitOk);
  EXPECT_EQ(out_.str(),
            "attempt,rank,step,name,value,unix_ms\n1,0,10,loss,0.1,1714564800010\n");
}

TEST_F(TessctlTest, MetricsJsonOfUnknownJobExitsThree) {
  EXPECT_EQ(
      RunMetrics({.job_id = 5, .format = OutputFormat::kJson}, *client_, out_, err_),
      kExitNotFound);
  EXPECT_EQ(err_.str(), "tessctl: job 5 not found\n");
}

// ---- unreachable coordinator ----

TEST(TessctlUnreachableTest, UnreachableCoordinatorExitsFourNamingTheAddress) {
  std::unique_ptr<CoordinatorClient> client =
      MakeCoordinatorClient({.address = "127.0.0.1:1"}, absl::Seconds(5));
  std::ostringstream out, err;
  EXPECT_EQ(RunJobs({}, *client, out, err), kExitUnreachable);
  EXPECT_THAT(err.str(), HasSubstr("cannot reach the coordinator at 127.0.0.1:1"));
  EXPECT_EQ(out.str(), "");
}

// ---- command line ----

TEST_F(TessctlTest, HelpShowsExitCodesAndEveryCommandHasAnExample) {
  EXPECT_EQ(Cli({"--help"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("Exit codes:"));
  EXPECT_THAT(out_.str(), HasSubstr("124"));
  for (const char* command : {"submit", "jobs", "status", "workers", "wait", "metrics"}) {
    out_.str("");
    EXPECT_EQ(Cli({command, "--help"}), kExitOk) << command;
    EXPECT_THAT(out_.str(), HasSubstr(absl::StrCat("Examples:\n  tessctl ", command)))
        << command;
  }
  EXPECT_TRUE(addresses_.empty());  // help talks to nobody
}

TEST_F(TessctlTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Cli({}), kExitUsage);
  EXPECT_EQ(Cli({"status"}), kExitUsage);
  EXPECT_EQ(Cli({"status", "abc"}), kExitUsage);
  EXPECT_EQ(Cli({"jobs", "-o", "yaml"}), kExitUsage);
  EXPECT_EQ(Cli({"status", "1", "-o", "csv"}), kExitUsage);
  EXPECT_EQ(Cli({"frobnicate"}), kExitUsage);
  EXPECT_EQ(Cli({"wait", "1", "--timeout", "-3"}), kExitUsage);
  EXPECT_TRUE(addresses_.empty());
}

TEST_F(TessctlTest, CoordinatorFlagBeatsEnvironmentWhichBeatsDefault) {
  unsetenv(kCoordinatorEnv);
  EXPECT_EQ(Cli({"jobs"}), kExitOk);
  setenv(kCoordinatorEnv, "10.1.2.3:6000", 1);
  EXPECT_EQ(Cli({"jobs"}), kExitOk);
  EXPECT_EQ(Cli({"--coordinator", "host-b:7000", "jobs"}), kExitOk);
  EXPECT_EQ(Cli({"jobs", "--coordinator", "host-c:7000"}), kExitOk);
  unsetenv(kCoordinatorEnv);
  EXPECT_THAT(addresses_, ElementsAre("127.0.0.1:50051", "10.1.2.3:6000", "host-b:7000",
                                      "host-c:7000"));
}

TEST_F(TessctlTest, CommandLineSubmitAppliesEachSetAndPrintsId) {
  const std::string path = WriteSpec(ExampleSpec());
  ASSERT_EQ(Cli({"submit", "--set", "trainer.epochs=3", path, "--set", "world_size=1"}),
            kExitOk)
      << err_.str();
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].spec().trainer().epochs(), 3);
  EXPECT_EQ(submits[0].spec().world_size(), 1);
  EXPECT_EQ(Lines(out_.str()).back(), "1");
}

TEST_F(TessctlTest, CommandLineStatusJsonAndWaitTimeout) {
  service_.AddJob(MakeJob(4, "demo", v1::JOB_STATE_RUNNING));
  ASSERT_EQ(Cli({"status", "4", "-o", "json"}), kExitOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["state"], "RUNNING");
  EXPECT_EQ(Cli({"wait", "4", "--timeout", "0.05"}), kExitTimeout);
}

// ---- pure formatting ----

TEST(OutputTest, DurationsUseAtMostTwoUnits) {
  EXPECT_EQ(HumanDuration(absl::Seconds(45)), "45s");
  EXPECT_EQ(HumanDuration(absl::Seconds(151)), "2m31s");
  EXPECT_EQ(HumanDuration(absl::Minutes(62) + absl::Seconds(5)), "1h02m");
  EXPECT_EQ(HumanDuration(absl::Hours(76)), "3d04h");
  EXPECT_EQ(HumanDuration(-absl::Seconds(3)), "0s");
  EXPECT_EQ(FormatElapsed(absl::Seconds(42)), "00:42");
  EXPECT_EQ(FormatElapsed(absl::Seconds(3723)), "1:02:03");
  EXPECT_EQ(FormatPercent(0.84123), "84.12%");
}

TEST(OutputTest, TableReplacesControlCharactersSoRowsStayOneLine) {
  Table table({"A", "B"});
  table.AddRow({"x\ny", "tab\there"});
  EXPECT_EQ(table.Render(), "A    B\nx y  tab here\n");
}

v1::MetricPoint Point(int32_t attempt, int32_t rank, int64_t step,
                      const std::string& name, double value, int64_t unix_ms = 0) {
  v1::MetricPoint p;
  p.set_attempt(attempt);
  p.set_rank(rank);
  p.set_step(step);
  p.set_name(name);
  p.set_value(value);
  p.set_unix_ms(unix_ms);
  return p;
}

TEST(ProgressTrackerTest, ShowsNewestStepEveryRankReportedAndIgnoresOtherAttempts) {
  v1::Job job;
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(2);
  ProgressTracker tracker;
  tracker.Update(
      2, 2,
      {Point(1, 0, 500, "loss", 9.0),  // old attempt, higher step
       Point(2, 0, 30, "loss", 1.0), Point(2, 1, 30, "loss", 3.0),
       Point(2, 0, 40, "loss", 0.4),  // rank 1 has not reported step 40
       Point(2, 0, 40, "images_per_sec", 80.0), Point(2, 1, 30, "images_per_sec", 70.0)},
      absl::UnixEpoch());
  ProgressInfo info = tracker.Info(job, absl::Seconds(3));
  ASSERT_TRUE(info.step.has_value());
  EXPECT_EQ(*info.step, 30);
  EXPECT_DOUBLE_EQ(*info.loss, 2.0);
  // Each rank's newest throughput, summed, even from different steps.
  EXPECT_DOUBLE_EQ(*info.images_per_sec, 150.0);
  EXPECT_FALSE(info.total_steps.has_value());
  // Step 30 is complete, 40 is not: the next fetch re-reads from after 30.
  EXPECT_EQ(tracker.FetchAfter(), 30);

  // Rank 1 catches up.
  tracker.Update(2, 2, {Point(2, 0, 40, "loss", 0.4), Point(2, 1, 40, "loss", 0.6)},
                 absl::UnixEpoch());
  info = tracker.Info(job, absl::Seconds(4));
  EXPECT_EQ(*info.step, 40);
  EXPECT_DOUBLE_EQ(*info.loss, 0.5);
  EXPECT_EQ(tracker.FetchAfter(), 40);
}

TEST(ProgressTrackerTest, EtaComesFromTotalStepsAndTheRecentStepRate) {
  v1::Job job;
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  constexpr int64_t kT0 = 1'700'000'000'000;
  ProgressTracker tracker;
  tracker.Update(1, 1,
                 {Point(1, 0, 0, "total_steps", 1000, kT0),
                  Point(1, 0, 100, "loss", 1.0, kT0 + 50'000)},
                 absl::UnixEpoch());
  ProgressInfo info = tracker.Info(job, absl::Seconds(1));
  EXPECT_EQ(info.total_steps, 1000);
  EXPECT_FALSE(info.eta.has_value());  // one observation: no rate yet
  EXPECT_THAT(FormatProgress(info), HasSubstr("step 100/1000 (10%)  loss 1.0000  ETA -"));

  // 100 more steps in 20 s: 5 steps/s, 800 steps to go.
  tracker.Update(1, 1, {Point(1, 0, 200, "loss", 0.8, kT0 + 70'000)}, absl::UnixEpoch());
  info = tracker.Info(job, absl::Seconds(2));
  ASSERT_TRUE(info.eta.has_value());
  EXPECT_EQ(*info.eta, absl::Seconds(160));
  EXPECT_THAT(FormatProgress(info), HasSubstr("ETA 2m40s"));

  // Observations older than the window stop counting: the rate is now the
  // recent 100 steps in 100 s.
  tracker.Update(1, 1,
                 {Point(1, 0, 300, "loss", 0.7, kT0 + 170'000),
                  Point(1, 0, 400, "loss", 0.6, kT0 + 270'000)},
                 absl::UnixEpoch());
  info = tracker.Info(job, absl::Seconds(3));
  EXPECT_EQ(*info.eta, absl::Seconds(600));

  // A restart starts over but keeps the run's length.
  job.set_attempt(2);
  tracker.Update(2, 1, {Point(2, 0, 350, "loss", 0.9, kT0 + 300'000)}, absl::UnixEpoch());
  info = tracker.Info(job, absl::Seconds(4));
  EXPECT_EQ(*info.step, 350);
  EXPECT_EQ(info.total_steps, 1000);
  EXPECT_FALSE(info.eta.has_value());
}

TEST(ProgressTest, FormatProgressShowsEachFieldItHas) {
  ProgressInfo info;
  info.elapsed = absl::Seconds(130);
  info.state = v1::JOB_STATE_RUNNING;
  info.epoch = 1.5;
  info.total_epochs = 3;
  info.step = 120;
  info.total_steps = 400;
  info.loss = 0.63214;
  info.images_per_sec = 153.24;
  info.eta = absl::Seconds(151);
  EXPECT_EQ(FormatProgress(info),
            "[02:10] RUNNING epoch 1.50/3  step 120/400 (30%)  loss 0.6321  153.2 img/s  "
            "ETA 2m31s");

  info.eta = absl::Milliseconds(200);  // rounds up: never "ETA 0s" while running
  EXPECT_THAT(FormatProgress(info), ::testing::EndsWith("ETA 1s"));
  info.eta = absl::ZeroDuration();
  EXPECT_THAT(FormatProgress(info), ::testing::EndsWith("ETA finishing"));
  info.eta.reset();
  EXPECT_THAT(FormatProgress(info), ::testing::EndsWith("ETA -"));

  // Without total_steps (an older trainer): no total, no percentage, no ETA.
  info.total_steps.reset();
  info.total_epochs.reset();
  info.attempt = 2;
  info.label = "job 17";
  EXPECT_EQ(FormatProgress(info),
            "[02:10] job 17 RUNNING epoch 1.50  step 120  loss 0.6321  153.2 img/s  "
            "(attempt 2)");
}

TEST(ProgressTest, ProgressLineBeforeMetricsShowsPendingReason) {
  ProgressInfo info;
  info.elapsed = absl::Seconds(5);
  info.state = v1::JOB_STATE_QUEUED;
  info.pending_reason = "needs 2 free slots";
  EXPECT_EQ(FormatProgress(info), "[00:05] QUEUED: needs 2 free slots");
}

TEST(ProgressTest, EstimateEtaNeedsTwoObservationsAndProgress) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(EstimateEta({}, 10, 100).has_value());
  EXPECT_FALSE(EstimateEta({{10, t0}}, 10, 100).has_value());
  EXPECT_FALSE(EstimateEta({{10, t0}, {10, t0 + absl::Seconds(5)}}, 10, 100).has_value());
  EXPECT_FALSE(EstimateEta({{10, t0}, {20, t0}}, 20, 100).has_value());
  EXPECT_EQ(EstimateEta({{10, t0}, {20, t0 + absl::Seconds(5)}}, 20, 100),
            absl::Seconds(40));
  EXPECT_EQ(EstimateEta({{10, t0}}, 100, 100), absl::ZeroDuration());
}

TEST(ProgressTest, RedrawLineReturnsToColumnOneCutsToWidthAndClearsTheRest) {
  EXPECT_EQ(RedrawLine("abc", 80), "\rabc\x1b[K");
  EXPECT_EQ(RedrawLine("abcdefghij", 8), "\rabcd...\x1b[K");  // 7 columns: no wrap
  EXPECT_EQ(RedrawLine("abcdefghij", 0), "\rabcdefghij\x1b[K");
  EXPECT_EQ(RedrawLine("a\nb", 0), "\ra b\x1b[K");
}

TEST(OutputTest, GrpcCodesMapOntoAbslCodes) {
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "x")).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x")).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(
      FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad")).message(),
      "bad");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

// ---- --token ----

TEST_F(TessctlTest, TokenTravelsAsBearerMetadataOnEveryCallAndIsNeverPrinted) {
  service_.AddJob(MakeJob(1, "a", v1::JOB_STATE_RUNNING));
  ASSERT_EQ(Cli({"--token", "s3cr3t-t0ken", "jobs"}), kExitOk) << err_.str();
  ASSERT_EQ(Cli({"status", "1", "--token", "s3cr3t-t0ken"}), kExitOk) << err_.str();
  ASSERT_EQ(Cli({"--token", "s3cr3t-t0ken", "sweep", "list"}), kExitOk) << err_.str();
  // A failing call prints an error; still no token in it.
  EXPECT_EQ(Cli({"--token", "s3cr3t-t0ken", "status", "99"}), kExitNotFound);
  const std::vector<std::string> seen = service_.authorizations();
  ASSERT_EQ(seen.size(), 4u);
  for (const std::string& value : seen) EXPECT_EQ(value, "Bearer s3cr3t-t0ken");
  EXPECT_THAT(out_.str(), Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(err_.str(), Not(HasSubstr("s3cr3t")));
}

TEST_F(TessctlTest, TokenComesFromTheEnvironmentAndTheFlagWins) {
  setenv(kTokenEnv, "from-env", 1);
  EXPECT_EQ(Cli({"workers"}), kExitOk);
  EXPECT_EQ(Cli({"workers", "--token", "from-flag"}), kExitOk);
  out_.str("");
  EXPECT_EQ(Cli({"--help"}), kExitOk);
  unsetenv(kTokenEnv);
  EXPECT_EQ(Cli({"workers"}), kExitOk);
  EXPECT_THAT(service_.authorizations(),
              ElementsAre("Bearer from-env", "Bearer from-flag",
                          FakeJobService::kNoAuthorization));
  EXPECT_THAT(out_.str(), HasSubstr("--token"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("from-env")));
}

TEST_F(TessctlTest, TlsRootsAndPinComeFromFlagsOrTheEnvironment) {
  EXPECT_EQ(Cli({"workers", "--tls-ca", "/etc/tessera/ca.pem"}), kExitOk);
  EXPECT_EQ(Cli({"workers", "--tls-pin", "ab12"}), kExitOk);
  setenv(kTlsPinEnv, "cd34", 1);
  EXPECT_EQ(Cli({"workers"}), kExitOk);
  EXPECT_EQ(Cli({"workers", "--tls-pin", "ef56"}), kExitOk);
  unsetenv(kTlsPinEnv);
  EXPECT_THAT(tls_, ElementsAre("/etc/tessera/ca.pem|", "|ab12", "|cd34", "|ef56"));
  out_.str("");
  EXPECT_EQ(Cli({"--help"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("--tls-ca"));
  EXPECT_THAT(out_.str(), HasSubstr("--tls-pin"));
}

TEST_F(TessctlTest, TokenThatCannotBeAHeaderExitsTwoWithoutEchoingIt) {
  EXPECT_EQ(Cli({"--token", "secret with space", "jobs"}), kExitUsage);
  EXPECT_EQ(Cli({"--token", "secretline\n", "jobs"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--token"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("secret")));
  EXPECT_TRUE(service_.authorizations().empty());
  EXPECT_TRUE(ValidateToken("abc.DEF-123_~+/=").ok());
}

// ---- jobs --state / --limit / --sweep, csv ----

void AddListedJobs(FakeJobService& service) {
  service.AddJob(MakeJob(1, "a", v1::JOB_STATE_RUNNING));
  service.AddJob(MakeJob(2, "b", v1::JOB_STATE_QUEUED));
  v1::Job c = MakeJob(3, "c,with comma", v1::JOB_STATE_RUNNING);
  c.set_sweep_id(7);
  c.set_sweep_point(1);
  c.set_reason("placed on \"node-a\"");
  service.AddJob(c);
  service.AddJob(MakeJob(4, "d", v1::JOB_STATE_SUCCEEDED));
}

constexpr char kJobsCsvHeader[] =
    "id,name,state,world_size,attempt,created_unix_ms,updated_unix_ms,sweep_id,reason\n";
constexpr char kJob3Csv[] =
    "3,\"c,with comma\",RUNNING,2,0,1714564800000,1714564951000,7,"
    "\"placed on \"\"node-a\"\"\"\n";

TEST_F(TessctlTest, JobsStateAndLimitReachTheServerAndCsvQuotesFields) {
  AddListedJobs(service_);
  ASSERT_EQ(Cli({"jobs", "--state", "running", "--limit", "1", "-o", "csv"}), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(), absl::StrCat(kJobsCsvHeader, kJob3Csv));
  ASSERT_EQ(Cli({"jobs", "--state", "JOB_STATE_Queued", "--sweep", "7"}), kExitOk);
  ASSERT_EQ(Cli({"jobs"}), kExitOk);

  const std::vector<v1::ListJobsRequest> requests = service_.list_requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(requests[0].limit(), 1);
  EXPECT_EQ(requests[1].state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(requests[1].sweep_id(), 7);
  EXPECT_EQ(requests[2].state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(requests[2].limit(), 0);
}

TEST_F(TessctlTest, JobsFiltersItselfWhenTheCoordinatorIgnoresTheFilters) {
  AddListedJobs(service_);
  service_.IgnoreListFilters();
  ASSERT_EQ(Cli({"jobs", "--state", "RUNNING", "--limit", "1", "-o", "csv"}), kExitOk);
  EXPECT_EQ(out_.str(), absl::StrCat(kJobsCsvHeader, kJob3Csv));
  out_.str("");
  ASSERT_EQ(Cli({"jobs", "--sweep", "7", "-o", "json"}), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["id"], 3);
  EXPECT_EQ(j[0]["sweep_id"], 7);
  EXPECT_EQ(j[0]["sweep_point"], 1);
}

TEST_F(TessctlTest, UnknownJobStateExitsTwoListingTheStatesBeforeAnyCall) {
  EXPECT_EQ(Cli({"jobs", "--state", "paused"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unknown job state 'paused'"));
  EXPECT_THAT(err_.str(),
              HasSubstr("QUEUED, SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED"));
  EXPECT_EQ(Cli({"jobs", "--state", "unspecified"}), kExitUsage);
  EXPECT_EQ(Cli({"jobs", "--limit", "-1"}), kExitUsage);
  EXPECT_TRUE(service_.list_requests().empty());
}

TEST_F(TessctlTest, WorkersAndMetricsCsvFromTheCommandLine) {
  v1::Worker w;
  w.set_name("node-a");
  w.set_hostname("node-a.lan");
  w.set_device_kind("cuda");
  w.set_slots(8);
  w.set_slots_used(4);
  w.set_alive(true);
  w.set_last_seen_unix_ms(1714564800000);
  service_.AddWorker(w);
  ASSERT_EQ(Cli({"workers", "-o", "csv"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "name,hostname,device_kind,slots,slots_used,alive,last_seen_unix_ms,"
            "slots_used_by_others,draining,drained,pool,slurm_job_id,gpu_ids\n"
            "node-a,node-a.lan,cuda,8,4,true,1714564800000,0,false,false,,,\n");

  out_.str("");
  service_.AddJob(MakeJob(1, "demo", v1::JOB_STATE_RUNNING));
  service_.AddPoint(1, 1, 10, "loss", 0.25);
  ASSERT_EQ(Cli({"metrics", "1", "--output", "CSV"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "attempt,rank,step,name,value,unix_ms\n1,1,10,loss,0.25,1714564800010\n");
}

// ---- help and completion ----

// The subcommand names a --help text lists.
std::vector<std::string> HelpSubcommands(const std::string& help) {
  std::vector<std::string> names;
  const size_t start = help.find("Subcommands:\n");
  if (start == std::string::npos) return names;
  for (absl::string_view line :
       absl::StrSplit(help.substr(start + strlen("Subcommands:\n")), '\n')) {
    if (line.empty()) break;
    // "  name   description"; description continuations are indented further.
    if (line.size() > 2 && line.substr(0, 2) == "  " && line[2] != ' ') {
      names.emplace_back(line.substr(2, line.find(' ', 2) - 2));
    }
  }
  return names;
}

TEST_F(TessctlTest, EveryCommandAndSubcommandHelpHasAnExampleAndExitCodes) {
  std::vector<std::vector<std::string>> todo = {{}};
  std::vector<std::string> visited;
  while (!todo.empty()) {
    const std::vector<std::string> path = todo.back();
    todo.pop_back();
    std::vector<std::string> args = path;
    args.push_back("--help");
    out_.str("");
    ASSERT_EQ(Cli(args), kExitOk) << absl::StrJoin(path, " ");
    const std::string help = out_.str();
    EXPECT_THAT(
        help, HasSubstr(absl::StrCat("Examples:\n  tessctl ", absl::StrJoin(path, " "))))
        << absl::StrJoin(path, " ");
    EXPECT_THAT(help, HasSubstr("Exit codes:")) << absl::StrJoin(path, " ");
    EXPECT_THAT(help, HasSubstr("124")) << absl::StrJoin(path, " ");
    visited.push_back(absl::StrJoin(path, " "));
    for (const std::string& name : HelpSubcommands(help)) {
      std::vector<std::string> sub = path;
      sub.push_back(name);
      todo.push_back(sub);
    }
  }
  EXPECT_THAT(
      visited,
      ::testing::UnorderedElementsAre(
          "", "submit", "jobs", "status", "workers", "share", "drain", "undrain", "wait",
          "cancel", "logs", "export", "eval", "metrics", "sweep", "sweep submit",
          "sweep follow", "sweep list", "sweep status", "sweep report", "sweep cancel",
          "search", "search submit", "search follow", "search list", "search status",
          "search report", "search cancel", "search best", "completion"));
  EXPECT_TRUE(addresses_.empty());  // help talks to nobody
}

TEST_F(TessctlTest, SweepHelpExplainsTheFileShorthand) {
  ASSERT_EQ(Cli({"sweep", "--help"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("`tessctl sweep FILE` is short for `tessctl sweep "
                                    "submit FILE`"));
}

class CompletionTest : public TessctlTest {
 protected:
  void SetUp() override {
    TessctlTest::SetUp();
    // An empty working directory, so that file completion adds nothing.
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("completion-", ::getpid());
    std::filesystem::create_directories(dir_ / "cwd");
    ASSERT_EQ(Cli({"completion", "bash"}), kExitOk) << err_.str();
    std::ofstream(dir_ / "tessctl.bash") << out_.str();
    EXPECT_TRUE(addresses_.empty());
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    TessctlTest::TearDown();
  }

  // COMPREPLY after completing `line`'s last word ("" for a new word).
  std::vector<std::string> Complete(const std::vector<std::string>& words) {
    std::string array;
    for (const std::string& w : words) absl::StrAppend(&array, "'", w, "' ");
    std::ofstream(dir_ / "driver.sh")
        << "cd '" << (dir_ / "cwd").string() << "'\n"
        << "source '" << (dir_ / "tessctl.bash").string() << "'\n"
        << "COMP_WORDS=(" << array << ")\n"
        << "COMP_CWORD=" << words.size() - 1 << "\n"
        << "_tessctl\n"
        << "printf '%s\\n' \"${COMPREPLY[@]}\"\n";
    const std::string command = absl::StrCat("bash ", (dir_ / "driver.sh").string());
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return {"popen failed"};
    std::string text;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), pipe)) text.append(buf, n);
    EXPECT_EQ(pclose(pipe), 0) << text;
    return Lines(text);
  }

  std::filesystem::path dir_;
};

TEST_F(CompletionTest, CompletesEveryTopLevelCommandAndNestedSweepCommands) {
  EXPECT_THAT(Complete({"tessctl", ""}),
              ::testing::UnorderedElementsAre(
                  "submit", "jobs", "status", "workers", "share", "drain", "undrain",
                  "wait", "cancel", "logs", "export", "eval", "metrics", "sweep",
                  "search", "completion"));
  EXPECT_THAT(
      Complete({"tessctl", "s"}),
      ::testing::UnorderedElementsAre("submit", "status", "share", "sweep", "search"));
  EXPECT_THAT(Complete({"tessctl", "sweep", ""}),
              ::testing::UnorderedElementsAre("submit", "follow", "list", "status",
                                              "report", "cancel"));
  // Global options and their values are skipped while finding the command.
  EXPECT_THAT(Complete({"tessctl", "--coordinator", "h:1", "sweep", "re"}),
              ElementsAre("report"));
  EXPECT_THAT(Complete({"tessctl", "completion", ""}), ElementsAre("bash"));
}

TEST_F(CompletionTest, CompletesSearchFollowAndTheFollowFlag) {
  EXPECT_THAT(Complete({"tessctl", "search", ""}),
              ::testing::UnorderedElementsAre("submit", "follow", "list", "status",
                                              "report", "cancel", "best"));
  EXPECT_THAT(Complete({"tessctl", "search", "submit", "s.yaml", "--fo"}),
              ElementsAre("--follow"));
  EXPECT_THAT(Complete({"tessctl", "search", "s.yaml", "--fo"}), ElementsAre("--follow"));
}

TEST_F(CompletionTest, CompletesOptionsAndTheirChoices) {
  const std::vector<std::string> options = Complete({"tessctl", "jobs", "--"});
  EXPECT_THAT(options,
              ::testing::IsSupersetOf({"--state", "--limit", "--sweep", "--output",
                                       "--coordinator", "--token", "--help"}));
  EXPECT_THAT(Complete({"tessctl", "jobs", "--state", ""}),
              ::testing::UnorderedElementsAre("queued", "scheduled", "running",
                                              "succeeded", "failed", "cancelled"));
  EXPECT_THAT(Complete({"tessctl", "metrics", "3", "-o", ""}),
              ::testing::UnorderedElementsAre("table", "json", "csv"));
  EXPECT_THAT(Complete({"tessctl", "status", "3", "--output", ""}),
              ::testing::UnorderedElementsAre("table", "json"));
  EXPECT_THAT(Complete({"tessctl", "sweep", "report", "4", "-o", "c"}),
              ElementsAre("csv"));
}

TEST_F(CompletionTest, CompletesSpecFilesWhereACommandTakesOne) {
  std::ofstream(dir_ / "cwd" / "study.yaml") << "name: x\n";
  EXPECT_THAT(Complete({"tessctl", "submit", "st"}), ElementsAre("study.yaml"));
  EXPECT_THAT(Complete({"tessctl", "sweep", "st"}),
              ::testing::UnorderedElementsAre("status", "study.yaml"));
  EXPECT_THAT(Complete({"tessctl", "status", "st"}), ::testing::IsEmpty());
}

// ---- sweeps ----

std::string SweepSpecText() {
  return "name: study\n"
         "grid:\n"
         "  world_size: [1, 2]\n"
         "  batch_size: [32]\n"
         "  scaling: [strong]\n"
         "base:\n"
         "  trainer: {model: vit-micro, dataset: synthetic, epochs: 1}\n";
}

TEST_F(TessctlTest, SweepFileShorthandValidatesSubmitsAndPrintsPointsThenIdLast) {
  const std::string text = ExampleFile("sweep-vit-micro-2x2.yaml");
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(Cli({"sweep", WriteSpec(text)}), kExitOk) << err_.str();
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("submitted sweep 1 (vit-micro-2x2): 4 points", "1"));
  const std::vector<v1::SubmitSweepRequest> submits = service_.sweep_submits();
  ASSERT_EQ(submits.size(), 1u);
  absl::StatusOr<v1::SweepSpec> expected = ParseAndValidateSweepSpec(text, SpecLimits{});
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(submits[0].spec(), *expected));
  EXPECT_EQ(submits[0].spec_yaml(), text);
  EXPECT_THAT(submits[0].client_request_id(), ::testing::MatchesRegex("[0-9a-f]{32}"));
}

TEST_F(TessctlTest, SweepSubmitAppliesSetOverrides) {
  ASSERT_EQ(Cli({"sweep", "submit", WriteSpec(SweepSpecText()), "--set", "repeats=3",
                 "--set", "base.trainer.epochs=2"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(Lines(out_.str()).front(), "submitted sweep 1 (study): 6 points");
  const std::vector<v1::SubmitSweepRequest> submits = service_.sweep_submits();
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].spec().repeats(), 3);
  EXPECT_EQ(submits[0].spec().base().trainer().epochs(), 2);
}

TEST_F(TessctlTest, RetriedSweepSubmitReusesTheClientRequestId) {
  service_.FailNextSubmits(1);
  SweepSubmitOptions options;
  options.spec_path = WriteSpec(SweepSpecText());
  options.initial_backoff = absl::Milliseconds(1);
  ASSERT_EQ(RunSweepSubmit(options, *client_, out_, err_), kExitOk) << err_.str();
  const std::vector<v1::SubmitSweepRequest> submits = service_.sweep_submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_EQ(submits[0].client_request_id(), submits[1].client_request_id());
  EXPECT_THAT(err_.str(), HasSubstr("retrying"));
  EXPECT_EQ(Lines(out_.str()).back(), "1");
}

TEST_F(TessctlTest, SweepSpecErrorExitsTwoNamingTheFieldAndSendsNothing) {
  std::string bad = SweepSpecText();
  bad.replace(bad.find("[strong]"), 8, "[strong, medium]");
  EXPECT_EQ(Cli({"sweep", WriteSpec(bad)}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("invalid sweep spec"));
  EXPECT_THAT(err_.str(), HasSubstr("grid.scaling[1]"));

  err_.str("");
  std::string unknown = SweepSpecText();
  unknown.replace(unknown.find("world_size"), 10, "worldsize");
  EXPECT_EQ(Cli({"sweep", "submit", WriteSpec(unknown)}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("worldsize"));

  err_.str("");
  EXPECT_EQ(Cli({"sweep", "submit", WriteSpec(SweepSpecText()), "--set",
                 "base.trainer.epochs=-1"}),
            kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("trainer.epochs"));

  EXPECT_EQ(Cli({"sweep", "/nonexistent/sweep.yaml"}), kExitUsage);
  EXPECT_TRUE(service_.sweep_submits().empty());
}

TEST_F(TessctlTest, SweepCommandLineMisuseExitsTwo) {
  EXPECT_EQ(Cli({"sweep"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("give a sweep spec FILE or a subcommand"));
  EXPECT_EQ(Cli({"sweep", "status", "1", "--follow"}), kExitUsage);
  EXPECT_EQ(Cli({"sweep", "status"}), kExitUsage);
  EXPECT_EQ(Cli({"sweep", "report", "1", "-o", "yaml"}), kExitUsage);
  EXPECT_TRUE(service_.sweep_submits().empty());
}

v1::SweepPoint MakePoint(int index, int world, int batch, int64_t job,
                         v1::JobState state) {
  v1::SweepPoint p;
  p.set_index(index);
  p.set_world_size(world);
  p.set_batch_size(batch);
  p.set_scaling("strong");
  p.set_shape("pack");
  p.set_job_id(job);
  p.set_state(state);
  return p;
}

v1::Sweep MakeSweep(v1::SweepState state, std::vector<v1::SweepPoint> points) {
  v1::Sweep sweep;
  sweep.set_id(1);
  sweep.set_name("study");
  sweep.set_state(state);
  sweep.mutable_spec()->set_name("study");
  for (const v1::SweepPoint& p : points) *sweep.add_points() = p;
  return sweep;
}

TEST_F(TessctlTest, SweepStatusShowsStateAndPointsTable) {
  v1::SweepPoint zero_stage_1 = MakePoint(1, 2, 32, 0, v1::JOB_STATE_UNSPECIFIED);
  zero_stage_1.set_zero_stage(1);
  service_.AddSweep(
      MakeSweep(v1::SWEEP_STATE_RUNNING,
                {MakePoint(0, 1, 32, 3, v1::JOB_STATE_RUNNING), zero_stage_1}));
  ASSERT_EQ(Cli({"sweep", "status", "1"}), kExitOk) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("STATE     RUNNING\n"));
  EXPECT_THAT(out, HasSubstr("2: 0 succeeded, 0 failed, 1 running, 1 waiting"));
  EXPECT_THAT(
      out,
      HasSubstr("INDEX  WORLD  BATCH  ZERO  SCALING  SHAPE  REPEAT  JOB  STATE\n"
                "0      1      32     0     strong   pack   0       3    RUNNING\n"
                "1      2      32     1     strong   pack   0       -    PENDING\n"));

  out_.str("");
  ASSERT_EQ(Cli({"sweep", "status", "1", "-o", "csv"}), kExitOk);
  EXPECT_EQ(out_.str(),
            "index,world_size,batch_size,scaling,shape,repeat,job_id,state,zero_stage\n"
            "0,1,32,strong,pack,0,3,RUNNING,0\n1,2,32,strong,pack,0,0,PENDING,1\n");

  out_.str("");
  ASSERT_EQ(Cli({"sweep", "status", "1", "-o", "json"}), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["id"], 1);
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["counts"]["total"], 2);
  EXPECT_EQ(j["counts"]["running"], 1);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["job_id"], 3);
  EXPECT_TRUE(j["points"][1]["job_id"].is_null());
  EXPECT_EQ(j["points"][1]["state"], "PENDING");
  EXPECT_EQ(j["spec"]["name"], "study");
  EXPECT_TRUE(j.contains("spec_yaml"));
}

TEST_F(TessctlTest, SweepListTableCsvAndJson) {
  v1::Sweep sweep =
      MakeSweep(v1::SWEEP_STATE_FAILED, {MakePoint(0, 1, 32, 3, v1::JOB_STATE_SUCCEEDED),
                                         MakePoint(1, 2, 32, 4, v1::JOB_STATE_FAILED)});
  sweep.set_reason("point 1 failed");
  service_.AddSweep(sweep);
  ASSERT_EQ(Cli({"sweep", "list"}), kExitOk) << err_.str();
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre("ID  NAME   STATE   POINTS  DONE  FAILED  AGE  REASON",
                  "1   study  FAILED  2       2     1       -    point 1 failed"));
  out_.str("");
  ASSERT_EQ(Cli({"sweep", "list", "-o", "csv"}), kExitOk);
  EXPECT_EQ(
      out_.str(),
      "id,name,state,points,succeeded,failed,created_unix_ms,updated_unix_ms,reason\n"
      "1,study,FAILED,2,1,1,0,0,point 1 failed\n");
  out_.str("");
  ASSERT_EQ(Cli({"sweep", "list", "-o", "json"}), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["state"], "FAILED");
  EXPECT_EQ(j[0]["counts"]["failed"], 1);
  EXPECT_FALSE(j[0].contains("points"));
}

v1::SweepReport MakeReport() {
  v1::SweepReport report;
  report.set_sweep_id(1);
  auto add = [&](int world, int batch, const char* scaling, const char* shape, int runs,
                 double mean, double std, double speedup, double efficiency, double comm,
                 double accuracy) {
    v1::SweepReportRow* row = report.add_rows();
    row->set_world_size(world);
    row->set_batch_size(batch);
    row->set_scaling(scaling);
    row->set_shape(shape);
    row->set_runs(runs);
    row->set_epoch_time_mean_s(mean);
    row->set_epoch_time_std_s(std);
    row->set_total_time_mean_s(mean * 2);
    row->set_images_per_sec(runs > 0 ? 4096 / mean : 0);
    row->set_speedup(speedup);
    row->set_efficiency(efficiency);
    row->set_baseline_world_size(1);
    row->set_comm_share(comm);
    row->set_final_accuracy(accuracy);
    for (int r = 0; r < runs; ++r) row->add_job_ids(10 * world + r);
  };
  add(1, 32, "strong", "pack", 2, 20.5, 0.25, 1.0, 1.0, 0.0, 0.8123);
  add(2, 32, "strong", "pack", 2, 11.0, 0.5, 1.8636, 0.9318, 0.123, 0.8101);
  add(4, 32, "weak", "pack", 0, 0, 0, 0, 0, 0, 0);
  add(8, 64, "strong", "2x4", 1, 3.25, 0, 4.0, 0.5, 0.25, 0.79);
  // ZeRO stage 1 at two ranks: CPU ranks' measured peak RSS and both counted
  // byte figures; the 8-rank row GPU ranks' allocator peak and only the
  // optimizer state's.
  report.mutable_rows(1)->set_zero_stage(1);
  report.mutable_rows(1)->set_peak_memory_bytes_per_rank(2147483648);  // 2 GiB
  report.mutable_rows(1)->set_memory_source("rss");
  report.mutable_rows(1)->set_optimizer_state_bytes_per_rank(1610612736);  // 1.5 GiB
  report.mutable_rows(1)->set_gradient_bytes_per_rank(536870912);          // 512 MiB
  report.mutable_rows(1)->set_parameter_bytes_per_rank(268435456);         // 256 MiB
  report.mutable_rows(3)->set_peak_memory_bytes_per_rank(3221225472);      // 3 GiB
  report.mutable_rows(3)->set_memory_source("cuda");
  report.mutable_rows(3)->set_optimizer_state_bytes_per_rank(3000);
  return report;
}

// MEMORY/RANK is the measured peak and its source; OPTIMIZER/RANK,
// GRADIENTS/RANK and PARAMETERS/RANK, the bytes the code counts, are its
// breakdown.
TEST(SweepOutputTest,
     ReportTableShowsTheMeasuredPeakThenTheCountedBytesWithDashesForNone) {
  EXPECT_THAT(Lines(FormatSweepReportTable(MakeReport())),
              ElementsAre("WORLD  BATCH  SCALING  SHAPE  ZERO  RUNS  EPOCH_TIME      "
                          "SPEEDUP  EFFICIENCY  COMM   ACCURACY  MEMORY/RANK     "
                          "OPTIMIZER/RANK  GRADIENTS/RANK  PARAMETERS/RANK",
                          "1      32     strong   pack   0     2     20.50 ± 0.25 s  "
                          "1.00x    100.0%      0.0%   81.23%    -               "
                          "-               -               -",
                          "2      32     strong   pack   1     2     11.00 ± 0.50 s  "
                          "1.86x    93.2%       12.3%  81.01%    2.0 GiB (RSS)   "
                          "1.5 GiB         512.0 MiB       256.0 MiB",
                          "4      32     weak     pack   0     0     -               "
                          "-        -           -      -         -               "
                          "-               -               -",
                          "8      64     strong   2x4    0     1     3.25 s          "
                          "4.00x    50.0%       25.0%  79.00%    3.0 GiB (CUDA)  "
                          "2.9 KiB         -               -"));
}

TEST_F(TessctlTest, SweepReportCsvAndJsonCarryTheCoordinatorsFigures) {
  service_.SetReport(MakeReport());
  ASSERT_EQ(Cli({"sweep", "report", "1", "-o", "csv"}), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "world_size,batch_size,scaling,shape,runs,epoch_time_mean_s,epoch_time_std_s,"
            "total_time_mean_s,images_per_sec,speedup,efficiency,baseline_world_size,"
            "comm_share,final_accuracy,job_ids,zero_stage,optimizer_state_bytes_per_rank,"
            "gradient_bytes_per_rank,peak_memory_bytes_per_rank,memory_source,"
            "parameter_bytes_per_rank");
  EXPECT_EQ(lines[2],
            "2,32,strong,pack,2,11,0.5,22,372.3636363636364,1.8636,0.9318,1,0.123,0.8101,"
            "20 21,1,1610612736,536870912,2147483648,rss,268435456");
  // Byte figures no rank reported are empty fields, not zeros.
  EXPECT_EQ(lines[3], "4,32,weak,pack,0,0,0,0,0,0,0,1,0,0,,0,,,,,");
  EXPECT_EQ(
      lines[4],
      "8,64,strong,2x4,1,3.25,0,6.5,1260.3076923076924,4,0.5,1,0.25,0.79,80,0,3000,,"
      "3221225472,cuda,");

  out_.str("");
  ASSERT_EQ(Cli({"sweep", "report", "1", "-o", "json"}), kExitOk);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["sweep_id"], 1);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][1]["world_size"], 2);
  EXPECT_DOUBLE_EQ(j["rows"][1]["speedup"].get<double>(), 1.8636);
  EXPECT_DOUBLE_EQ(j["rows"][1]["comm_share"].get<double>(), 0.123);
  EXPECT_EQ(j["rows"][1]["job_ids"], nlohmann::json::array({20, 21}));
  EXPECT_EQ(j["rows"][1]["zero_stage"], 1);
  EXPECT_DOUBLE_EQ(j["rows"][1]["optimizer_state_bytes_per_rank"].get<double>(),
                   1610612736);
  EXPECT_DOUBLE_EQ(j["rows"][1]["gradient_bytes_per_rank"].get<double>(), 536870912);
  EXPECT_TRUE(j["rows"][0]["optimizer_state_bytes_per_rank"].is_null());
  EXPECT_TRUE(j["rows"][3]["gradient_bytes_per_rank"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][3]["optimizer_state_bytes_per_rank"].get<double>(), 3000);
  // The measured peak beside the counted bytes, and what measured it.
  EXPECT_DOUBLE_EQ(j["rows"][1]["peak_memory_bytes_per_rank"].get<double>(), 2147483648);
  EXPECT_EQ(j["rows"][1]["memory_source"], "rss");
  EXPECT_DOUBLE_EQ(j["rows"][3]["peak_memory_bytes_per_rank"].get<double>(), 3221225472);
  EXPECT_EQ(j["rows"][3]["memory_source"], "cuda");
  EXPECT_TRUE(j["rows"][0]["peak_memory_bytes_per_rank"].is_null());
  EXPECT_TRUE(j["rows"][0]["memory_source"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][1]["parameter_bytes_per_rank"].get<double>(), 268435456);
  EXPECT_TRUE(j["rows"][3]["parameter_bytes_per_rank"].is_null());

  out_.str("");
  ASSERT_EQ(Cli({"sweep", "report", "1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("11.00 ± 0.50 s  1.86x"));
  EXPECT_THAT(out_.str(), HasSubstr("2.0 GiB (RSS)   1.5 GiB         512.0 MiB"));
}

TEST_F(TessctlTest, UnknownSweepExitsThree) {
  EXPECT_EQ(Cli({"sweep", "status", "9"}), kExitNotFound);
  EXPECT_EQ(err_.str(), "tessctl: sweep 9 not found\n");
  EXPECT_EQ(Cli({"sweep", "report", "9"}), kExitNotFound);
  EXPECT_EQ(Cli({"sweep", "cancel", "9"}), kExitNotFound);
  EXPECT_EQ(Cli({"sweep", "follow", "9"}), kExitNotFound);
}

TEST_F(TessctlTest, SweepCancelRecordsCancelledAndRefusesEndedSweeps) {
  service_.AddSweep(MakeSweep(v1::SWEEP_STATE_RUNNING, {}));
  EXPECT_EQ(Cli({"sweep", "cancel", "1"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "sweep 1 CANCELLED\n");
  EXPECT_EQ(Cli({"sweep", "cancel", "1"}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("already ended"));
}

TEST_F(TessctlTest, SweepFollowPrintsEachPointChangeAndExitsWithTheSweepsResult) {
  const v1::JobState kNone = v1::JOB_STATE_UNSPECIFIED;
  service_.AddSweep(MakeSweep(v1::SWEEP_STATE_RUNNING, {}));
  service_.ScriptSweep(
      1,
      {MakeSweep(v1::SWEEP_STATE_RUNNING,
                 {MakePoint(0, 1, 32, 0, kNone), MakePoint(1, 2, 32, 0, kNone)}),
       MakeSweep(v1::SWEEP_STATE_RUNNING, {MakePoint(0, 1, 32, 5, v1::JOB_STATE_QUEUED),
                                           MakePoint(1, 2, 32, 0, kNone)}),
       MakeSweep(v1::SWEEP_STATE_RUNNING,
                 {MakePoint(0, 1, 32, 5, v1::JOB_STATE_SUCCEEDED),
                  MakePoint(1, 2, 32, 6, v1::JOB_STATE_RUNNING)}),
       MakeSweep(v1::SWEEP_STATE_SUCCEEDED,
                 {MakePoint(0, 1, 32, 5, v1::JOB_STATE_SUCCEEDED),
                  MakePoint(1, 2, 32, 6, v1::JOB_STATE_SUCCEEDED)})});
  SweepFollowOptions options;
  options.sweep_id = 1;
  options.poll_interval = absl::Milliseconds(1);
  options.progress_interval = absl::Hours(1);  // one status line, at the start
  EXPECT_EQ(RunSweepFollow(options, *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre(
          "[00:00] sweep 1: 0/2 done, 0 running, 2 waiting",
          "[00:00] point 0 (world 1, batch 32, strong, pack, repeat 0): job 5 QUEUED",
          "[00:00] point 0 (world 1, batch 32, strong, pack, repeat 0): job 5 "
          "SUCCEEDED",
          "[00:00] point 1 (world 2, batch 32, strong, pack, repeat 0): job 6 RUNNING",
          "[00:00] point 1 (world 2, batch 32, strong, pack, repeat 0): job 6 "
          "SUCCEEDED",
          "sweep 1 SUCCEEDED in 0s: 2 of 2 points succeeded; see tessctl sweep "
          "report 1"));
}

TEST_F(TessctlTest, SweepFollowOnATerminalShowsTheRunningPointsProgressInPlace) {
  v1::Job job = MakeJob(5, "study/n1", v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  job.mutable_spec()->set_world_size(1);
  service_.AddJob(job);
  service_.AddPoint(1, 0, 10, "loss", 0.5);
  service_.AddSweep(MakeSweep(v1::SWEEP_STATE_RUNNING, {}));
  v1::Sweep failed = MakeSweep(v1::SWEEP_STATE_FAILED,
                               {MakePoint(0, 1, 32, 5, v1::JOB_STATE_FAILED),
                                MakePoint(1, 2, 32, 0, v1::JOB_STATE_UNSPECIFIED)});
  failed.set_reason("point 0 failed");
  service_.ScriptSweep(1, {MakeSweep(v1::SWEEP_STATE_RUNNING,
                                     {MakePoint(0, 1, 32, 5, v1::JOB_STATE_RUNNING),
                                      MakePoint(1, 2, 32, 0, v1::JOB_STATE_UNSPECIFIED)}),
                           failed});
  SweepFollowOptions options;
  options.sweep_id = 1;
  options.live = true;
  options.poll_interval = absl::Milliseconds(1);
  EXPECT_EQ(RunSweepFollow(options, *client_, out_, err_), kExitFailed) << err_.str();
  EXPECT_EQ(
      out_.str(),
      "[00:00] point 0 (world 1, batch 32, strong, pack, repeat 0): job 5 RUNNING\n"
      "\r[00:00] sweep 1: 0/2 done, point 0 job 5 RUNNING step 10  loss 0.5000\x1b[K"
      "\r\x1b[K[00:00] point 0 (world 1, batch 32, strong, pack, repeat 0): job 5 "
      "FAILED\n"
      "sweep 1 FAILED after 0s: point 0 failed (0 of 2 points succeeded)\n");
}

TEST(SweepExamplesTest, ExampleSweepsValidateAndExpandToTheirGrids) {
  absl::StatusOr<v1::SweepSpec> small =
      ParseAndValidateSweepSpec(ExampleFile("sweep-vit-micro-2x2.yaml"), SpecLimits{});
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<std::vector<SweepJob>> points = ExpandSweep(*small, SpecLimits{});
  ASSERT_TRUE(points.ok()) << points.status();
  std::vector<std::pair<int, int>> coordinates;
  for (const SweepJob& p : *points) {
    coordinates.emplace_back(p.point.world_size(), p.point.batch_size());
    EXPECT_EQ(p.job.trainer().model(), "vit-micro");
    EXPECT_EQ(p.job.trainer().scaling(), "strong");
    EXPECT_EQ(p.job.trainer().threads(), 1);
    EXPECT_EQ(p.job.trainer().data_dir(), "/usr/share/datasets/fashion-mnist");
  }
  EXPECT_THAT(coordinates,
              ::testing::UnorderedElementsAre(std::pair(1, 32), std::pair(2, 32),
                                              std::pair(1, 64), std::pair(2, 64)));

  absl::StatusOr<v1::SweepSpec> paper =
      ParseAndValidateSweepSpec(ExampleFile("paper-study.yaml"), SpecLimits{});
  ASSERT_TRUE(paper.ok()) << paper.status();
  EXPECT_THAT(paper->grid().world_size(), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(paper->grid().scaling(), ElementsAre("strong", "weak"));
  EXPECT_EQ(paper->base().trainer().model(), "vit-b16");
  EXPECT_EQ(paper->base().trainer().image_size(), 224);
  EXPECT_EQ(paper->base().trainer().dataset(), "cifar10");
  points = ExpandSweep(*paper, SpecLimits{});
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(points->size(), 48u);
}

TEST(OutputTest, TableAlignsMultiByteCharactersByColumns) {
  Table table({"A", "B"});
  table.AddRow({"1 ± 2", "x"});
  table.AddRow({"12345", "y"});
  EXPECT_EQ(table.Render(), "A      B\n1 ± 2  x\n12345  y\n");
  EXPECT_EQ(DisplayWidth("± é"), 3u);
  EXPECT_EQ(TruncateToWidth("±±±±±±", 5), "±±...");
}

// ---- export ----

// A stand-in for tessera-export that records its arguments and exits with
// the code in the file `code` beside it.
std::string FakeExporter(const std::string& dir) {
  const std::string path = dir + "/tessera-export";
  std::ofstream(path) << "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" << dir
                      << "/args\"\nexit $(cat \"" << dir << "/code\")\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  std::ofstream(dir + "/code") << "0";
  return path;
}

TEST_F(TessctlTest, ExportRunsTheExporterOnTheJobsCheckpointsWithItsModelShape) {
  const std::string dir = ::testing::TempDir() + "/export-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  v1::Job job = MakeJob(12, "pets", v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->mutable_trainer()->set_model("vit-s16");
  job.mutable_spec()->mutable_trainer()->set_dataset("imagefolder");
  job.mutable_spec()->mutable_trainer()->set_image_size(160);
  job.mutable_spec()->mutable_trainer()->set_checkpoint_dir("/shared/ckpt/pets");
  // The preprocessing the spec sets goes to the exporter, for the metadata.
  for (const double v : {0.5, 0.5, 0.5})
    job.mutable_spec()->mutable_trainer()->add_mean(v);
  job.mutable_spec()->mutable_trainer()->set_crop_fraction(0.9);
  job.mutable_spec()->mutable_trainer()->set_interpolation("bicubic");
  service_.AddJob(job);

  ASSERT_EQ(Cli({"export", "12", "--names", "timm", "--step", "300", "-o", "pets.st",
                 "--exporter", FakeExporter(dir)}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(ReadFile(dir + "/args"),
            "--checkpoint\n/shared/ckpt/pets\n--model\nvit-s16\n--channels\n3\n"
            "--image-size\n160\n--names\ntimm\n-o\npets.st\n--step\n300\n"
            "--dataset\nimagefolder\n--mean\n0.5\n0.5\n0.5\n--crop-fraction\n0.9\n"
            "--interpolation\nbicubic\n");
  EXPECT_THAT(out_.str(), HasSubstr("job 12 (vit-s16) from /shared/ckpt/pets"));

  // A grayscale dataset trains a one-channel model; --checkpoint reads another mount.
  job.mutable_spec()->mutable_trainer()->set_dataset("fashion-mnist");
  service_.AddJob(job);
  std::ofstream(dir + "/code") << "7";
  EXPECT_EQ(Cli({"export", "12", "-o", "m.st", "--checkpoint", "/mnt/ckpt/pets",
                 "--exporter", dir + "/tessera-export"}),
            7);
  EXPECT_THAT(
      ReadFile(dir + "/args"),
      HasSubstr("--checkpoint\n/mnt/ckpt/pets\n--model\nvit-s16\n--channels\n1\n"));
  EXPECT_THAT(ReadFile(dir + "/args"), HasSubstr("--names\ntorchvision\n"));
}

TEST_F(TessctlTest, ExportOfAJobWithoutCheckpointsOrOfAnUnknownJobSaysWhy) {
  const std::string dir =
      ::testing::TempDir() + "/export-none-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string exporter = FakeExporter(dir);
  service_.AddJob(MakeJob(4, "no-ckpt", v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(Cli({"export", "4", "-o", "m.st", "--exporter", exporter}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("job 4 wrote no checkpoints"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/args"));

  EXPECT_EQ(Cli({"export", "99", "-o", "m.st", "--exporter", exporter}), kExitNotFound);
  EXPECT_EQ(Cli({"export", "4", "-o", "m.st", "--names", "keras"}), kExitUsage);
  EXPECT_EQ(Cli({"export", "4", "-o", "m.st", "--exporter", dir + "/missing"}),
            kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("is not an executable file"));
}

// ---- eval ----

TEST_F(TessctlTest, EvalOfAJobSubmitsItsSpecAsAnEvalJobOfItsCheckpoint) {
  v1::Job job = MakeJob(12, "pets", v1::JOB_STATE_SUCCEEDED);
  job.set_spec_yaml(
      "name: pets\nworld_size: 2\nnodes: 2\ntrainer:\n  model: vit-s16\n"
      "  dataset: imagefolder\n  data_dir: /data/pets\n  image_size: 160\n"
      "  checkpoint_dir: /shared/ckpt/pets\n  init_from: /data/models/in1k.safetensors\n"
      "  lr: 0.001\n");
  job.mutable_spec()->mutable_trainer()->set_checkpoint_dir("/shared/ckpt/pets");
  service_.AddJob(job);

  ASSERT_EQ(
      Cli({"eval", "12", "--step", "300", "--data", "/data/pets-v2", "--split", "val"}),
      kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("submitted eval job"));
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  const v1::JobSpec& spec = submits[0].spec();
  EXPECT_EQ(spec.kind(), "eval");
  EXPECT_EQ(spec.eval_of(), 12);
  EXPECT_EQ(spec.name(), "pets-eval");
  EXPECT_EQ(spec.world_size(), 1);
  EXPECT_EQ(spec.nodes(), 0);
  const v1::TrainerConfig& t = spec.trainer();
  EXPECT_TRUE(t.eval_only());
  EXPECT_TRUE(t.resume());
  EXPECT_EQ(t.eval_step(), 300);
  EXPECT_EQ(t.eval_split(), "val");
  EXPECT_EQ(t.data_dir(), "/data/pets-v2");
  EXPECT_EQ(t.model(), "vit-s16");
  EXPECT_EQ(t.image_size(), 160);
  EXPECT_EQ(t.checkpoint_dir(), "/shared/ckpt/pets");
  EXPECT_EQ(t.init_from(), "");  // the checkpoint, not the fine-tuning start
  EXPECT_THAT(submits[0].spec_yaml(), HasSubstr("eval_only: true"));
}

TEST_F(TessctlTest, EvalFromAWeightsFileBuildsAnEvalSpecOfItsOwn) {
  ASSERT_EQ(Cli({"eval", "--from", "/data/models/vit.safetensors", "--model", "vit-ti16",
                 "--data", "/data/pets", "--image-size", "224", "--device", "cuda"}),
            kExitOk)
      << err_.str();
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  const v1::JobSpec& spec = submits[0].spec();
  EXPECT_EQ(spec.kind(), "eval");
  EXPECT_EQ(spec.name(), "eval-vit");
  EXPECT_EQ(spec.eval_of(), 0);
  EXPECT_EQ(spec.trainer().init_from(), "/data/models/vit.safetensors");
  EXPECT_EQ(spec.trainer().dataset(), "imagefolder");
  EXPECT_EQ(spec.trainer().image_size(), 224);
  EXPECT_EQ(spec.trainer().device(), "cuda");
  EXPECT_FALSE(spec.trainer().resume());
}

TEST_F(TessctlTest, EvalSetsTheDatasPreprocessingKeys) {
  ASSERT_EQ(Cli({"eval", "--from", "/data/models/vit.safetensors", "--model", "vit-micro",
                 "--data", "/data/pets", "--image-size", "32", "--set",
                 "trainer.crop_fraction=1", "--set", "trainer.interpolation=bicubic",
                 "--set", "trainer.mean=[0.5, 0.5, 0.5]", "--set",
                 "trainer.std=[0.25,0.25,0.25]", "--set", "trainer.image_size=48"}),
            kExitOk)
      << err_.str();
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  const v1::TrainerConfig& t = submits[0].spec().trainer();
  EXPECT_DOUBLE_EQ(t.crop_fraction(), 1.0);
  EXPECT_EQ(t.interpolation(), "bicubic");
  EXPECT_THAT(t.mean(), ::testing::ElementsAre(0.5, 0.5, 0.5));
  EXPECT_THAT(t.std(), ::testing::ElementsAre(0.25, 0.25, 0.25));
  EXPECT_EQ(t.image_size(), 48);  // --set comes after --image-size

  // Of a job: over the job's own keys.
  v1::Job job = MakeJob(12, "pets", v1::JOB_STATE_SUCCEEDED);
  job.set_spec_yaml(
      "name: pets\nworld_size: 1\ntrainer:\n  model: vit-micro\n  dataset: "
      "imagefolder\n  data_dir: /data/pets\n  crop_fraction: 0.9\n  checkpoint_dir: "
      "/shared/ckpt/pets\n");
  job.mutable_spec()->mutable_trainer()->set_checkpoint_dir("/shared/ckpt/pets");
  service_.AddJob(job);
  ASSERT_EQ(Cli({"eval", "12", "--set", "trainer.crop_fraction=1"}), kExitOk)
      << err_.str();
  ASSERT_EQ(service_.submits().size(), 2u);
  EXPECT_DOUBLE_EQ(service_.submits()[1].spec().trainer().crop_fraction(), 1.0);
}

TEST_F(TessctlTest, EvalSetOfAnyOtherKeyOrABadValueIsAUsageError) {
  for (const char* set :
       {"trainer.lr=1", "world_size=2", "crop_fraction=1", "trainer.crop_fraction"}) {
    err_.str("");
    EXPECT_EQ(Cli({"eval", "--from", "/m.safetensors", "--model", "vit-micro", "--data",
                   "/d", "--set", set}),
              kExitUsage)
        << set;
    EXPECT_THAT(err_.str(), HasSubstr("tessctl eval: --set")) << set;
    EXPECT_THAT(err_.str(), HasSubstr("trainer.crop_fraction, trainer.mean")) << set;
  }
  // Values the spec refuses: the spec's own message, naming the key.
  err_.str("");
  EXPECT_EQ(Cli({"eval", "--from", "/m.safetensors", "--model", "vit-micro", "--data",
                 "/d", "--set", "trainer.interpolation=lanczos"}),
            kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("trainer.interpolation"));
  err_.str("");
  EXPECT_EQ(Cli({"eval", "--from", "/m.safetensors", "--model", "vit-micro", "--data",
                 "/d", "--set", "trainer.crop_fraction=1.5"}),
            kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("trainer.crop_fraction"));
  EXPECT_TRUE(service_.submits().empty());
}

TEST_F(TessctlTest, ArgumentsThatDoNotParseGetTheCommandsUsageError) {
  // A stray word where a job id goes, a count that is no number: what was
  // expected, never CLI11's range to the largest double.
  EXPECT_EQ(Cli({"eval", "trainer.crop_fraction=1", "--data", "/d"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("tessctl eval: job: expected a whole number >= 1, "
                                    "got \"trainer.crop_fraction=1\""));
  EXPECT_THAT(err_.str(), HasSubstr("tessctl eval --help"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("not in range")));
  err_.str("");
  EXPECT_EQ(Cli({"jobs", "--limit", "many"}), kExitUsage);
  EXPECT_THAT(
      err_.str(),
      HasSubstr("tessctl jobs: --limit: expected a whole number >= 0, got \"many\""));
  err_.str("");
  EXPECT_EQ(Cli({"status", "0"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("tessctl status: job: expected a whole number >= 1"));
  err_.str("");
  EXPECT_EQ(Cli({"wait", "3", "--timeout", "soon"}), kExitUsage);
  EXPECT_THAT(err_.str(),
              HasSubstr("tessctl wait: --timeout: expected a number >= 0, got \"soon\""));
}

TEST_F(TessctlTest, EvalRefusesContradictionsAndJobsWithoutCheckpointsBeforeSubmitting) {
  service_.AddJob(MakeJob(4, "no-ckpt", v1::JOB_STATE_SUCCEEDED));
  EXPECT_EQ(Cli({"eval", "4"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("job 4 wrote no checkpoints"));
  EXPECT_EQ(Cli({"eval", "--from", "/data/m.safetensors", "--data", "/data/pets"}),
            kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--from needs --model and --data"));
  EXPECT_EQ(Cli({"eval", "4", "--from", "/data/m.safetensors"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("not both"));
  EXPECT_EQ(Cli({"eval", "4", "--split", "holdout"}), kExitUsage);
  EXPECT_EQ(Cli({"eval", "99"}), kExitNotFound);
  EXPECT_TRUE(service_.submits().empty());
}

TEST_F(TessctlTest, StatusJsonOfAnEvalJobHasItsResultPerClassAndConfusion) {
  v1::Job job = MakeJob(8, "pets-eval", v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->set_kind("eval");
  v1::RankStatus* rank = AddRank(job, 0, true, 0.75);
  v1::EvalResult* e = rank->mutable_eval();
  e->set_split("val");
  e->set_step(300);
  e->set_samples(4);
  e->set_top1(0.75);
  e->set_top5(1.0);
  e->set_loss(0.5);
  for (const char* name : {"cat", "dog"}) e->add_class_names(name);
  e->add_class_accuracy(1.0);
  e->add_class_accuracy(0.5);
  e->add_class_samples(2);
  e->add_class_samples(2);
  for (int64_t cell : {2, 0, 1, 1}) e->add_confusion(cell);
  service_.AddJob(job);

  ASSERT_EQ(RunStatus({.job_id = 8, .format = OutputFormat::kJson}, *client_, out_, err_),
            kExitOk)
      << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["kind"], "eval");
  EXPECT_DOUBLE_EQ(j["eval"]["top1"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["eval"]["top5"].get<double>(), 1.0);
  EXPECT_EQ(j["eval"]["step"], 300);
  EXPECT_EQ(j["eval"]["classes"][1]["name"], "dog");
  EXPECT_DOUBLE_EQ(j["eval"]["classes"][1]["accuracy"].get<double>(), 0.5);
  EXPECT_EQ(j["eval"]["confusion"], nlohmann::json::parse("[[2, 0], [1, 1]]"));

  out_.str("");
  ASSERT_EQ(RunStatus({.job_id = 8}, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("top-1 75.00%, top-5 100.00%, loss 0.5000 on val"));
}

}  // namespace
}  // namespace tessera::cli
