// tessctl against a fake JobService served in-process: commands, exit codes,
// retries, argument parsing and output formats.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
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
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cli/app.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "coordinator/common/job_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ExampleSpec() {
  std::filesystem::path root;
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) {
    root = dir;
  } else {
    root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  }
  return ReadFile(root / "examples" / "fmnist-2rank.yaml");
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// An in-memory JobService. GetJob walks through a per-job script of states so
// tests can drive `wait`; SubmitJob can be told to fail with UNAVAILABLE first.
class FakeJobService final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    submits_.push_back(*request);
    if (unavailable_submits_ > 0) {
      --unavailable_submits_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    if (auto it = by_request_id_.find(request->client_request_id());
        it != by_request_id_.end()) {
      response->set_job_id(it->second);
      return grpc::Status::OK;
    }
    v1::Job job;
    job.set_id(next_id_++);
    job.set_name(request->spec().name());
    job.set_state(v1::JOB_STATE_QUEUED);
    *job.mutable_spec() = request->spec();
    job.set_spec_yaml(request->spec_yaml());
    jobs_[job.id()] = job;
    by_request_id_[request->client_request_id()] = job.id();
    response->set_job_id(job.id());
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it)
      *response->add_jobs() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++get_job_calls_;
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job ", request->job_id(), " not found"));
    }
    std::deque<v1::JobState>& script = state_scripts_[it->first];
    if (!script.empty()) {
      it->second.set_state(script.front());
      if (script.size() > 1) script.pop_front();
    }
    *response->mutable_job() = it->second;
    return grpc::Status::OK;
  }

  grpc::Status GetMetrics(grpc::ServerContext*, const v1::GetMetricsRequest* request,
                          v1::GetMetricsResponse* response) override {
    absl::MutexLock lock(&mu_);
    metrics_requests_.push_back(*request);
    const int limit = request->limit() > 0 ? request->limit() : 10000;
    for (const v1::MetricPoint& p : points_) {  // kept sorted by step
      if (p.step() <= request->after_step()) continue;
      if (!request->name().empty() && p.name() != request->name()) continue;
      if (response->points_size() >= limit) break;
      *response->add_points() = p;
    }
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const v1::Worker& w : workers_) *response->add_workers() = w;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end())
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    if (it->second.state() == v1::JOB_STATE_SUCCEEDED) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", it->first, " already ended: SUCCEEDED"));
    }
    it->second.set_state(v1::JOB_STATE_CANCELLED);
    response->set_state(v1::JOB_STATE_CANCELLED);
    return grpc::Status::OK;
  }

  // Serves `log_` in pieces of at most 4 bytes; complete once all was read.
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest* request,
                       v1::GetLogsResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (!jobs_.contains(request->job_id())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    }
    const size_t offset = std::min<size_t>(request->offset(), log_.size());
    response->set_data(log_.substr(offset, 4));
    response->set_next_offset(offset + response->data().size());
    response->set_attempt(1);
    response->set_complete(response->data().empty());
    return grpc::Status::OK;
  }
  void SetLog(std::string log) {
    absl::MutexLock lock(&mu_);
    log_ = std::move(log);
  }

  void AddJob(const v1::Job& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job.id()] = job;
  }
  void ScriptStates(int64_t job_id, std::deque<v1::JobState> states) {
    absl::MutexLock lock(&mu_);
    state_scripts_[job_id] = std::move(states);
  }
  // Points must be added in step order.
  void AddPoint(int32_t attempt, int32_t rank, int64_t step, const std::string& name,
                double value) {
    absl::MutexLock lock(&mu_);
    v1::MetricPoint p;
    p.set_attempt(attempt);
    p.set_rank(rank);
    p.set_step(step);
    p.set_name(name);
    p.set_value(value);
    p.set_unix_ms(1714564800000 + step);
    points_.push_back(p);
  }
  void AddWorker(const v1::Worker& worker) {
    absl::MutexLock lock(&mu_);
    workers_.push_back(worker);
  }
  void FailNextSubmits(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_submits_ = n;
  }
  std::vector<v1::SubmitJobRequest> submits() {
    absl::MutexLock lock(&mu_);
    return submits_;
  }
  std::vector<v1::GetMetricsRequest> metrics_requests() {
    absl::MutexLock lock(&mu_);
    return metrics_requests_;
  }
  int get_job_calls() {
    absl::MutexLock lock(&mu_);
    return get_job_calls_;
  }

 private:
  absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int unavailable_submits_ ABSL_GUARDED_BY(mu_) = 0;
  int get_job_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_request_id_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::deque<v1::JobState>> state_scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::MetricPoint> points_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitJobRequest> submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetMetricsRequest> metrics_requests_ ABSL_GUARDED_BY(mu_);
  std::string log_ ABSL_GUARDED_BY(mu_);
};

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

  std::unique_ptr<CoordinatorClient> MakeClient() {
    return std::make_unique<CoordinatorClient>(
        channel_, CoordinatorClient::Options{.rpc_timeout = absl::Seconds(10),
                                             .target = "in-process"});
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
  int Cli(const std::vector<std::string>& args) {
    return RunTessctl(
        args,
        [this](const std::string& address) {
          addresses_.push_back(address);
          return MakeClient();
        },
        out_, err_);
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<CoordinatorClient> client_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::vector<std::string> addresses_;
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
  EXPECT_THAT(
      out,
      HasSubstr("RANK  WORKER  SLOT  STATE   PID   EXIT  PARAM_HASH  TEST_ACCURACY"));
  EXPECT_THAT(out,
              HasSubstr("0     node-0  0     exited  4000  0     9f1c2a      84.12%"));
  EXPECT_THAT(out, HasSubstr("1     node-1  1     exited  4001  3     -           -"));
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
  EXPECT_EQ(lines[0], "NAME    HOST        KIND  SLOTS  USED  ALIVE  LAST-SEEN");
  EXPECT_EQ(lines[1], "node-a  node-a.lan  cpu   4      2     yes    -");
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

TEST_F(TessctlTest, WaitProgressShowsLatestStepMeanLossAndSummedThroughput) {
  v1::Job job = MakeJob(1, "demo", v1::JOB_STATE_RUNNING);
  job.set_attempt(1);
  service_.AddJob(job);
  service_.ScriptStates(1, {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED});
  service_.AddPoint(1, 0, 10, "loss", 2.0);
  service_.AddPoint(1, 1, 10, "loss", 2.2);
  service_.AddPoint(1, 0, 20, "images_per_sec", 100.0);
  service_.AddPoint(1, 0, 20, "loss", 0.5);
  service_.AddPoint(1, 1, 20, "images_per_sec", 53.2);
  service_.AddPoint(1, 1, 20, "loss", 0.7);
  service_.AddPoint(1, 0, 20, "test_accuracy", 0.81);
  service_.AddPoint(1, 1, 20, "test_accuracy", 0.83);

  WaitOptions options = Wait(1);
  options.progress = true;
  EXPECT_EQ(RunWait(options, *client_, out_, err_), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_THAT(lines[0],
              ::testing::MatchesRegex(
                  R"(\[00:00\] RUNNING step 20  loss 0\.6000  2 ranks  153\.2 img/s)"));
  // No rank result: the accuracy comes from the newest test_accuracy points.
  EXPECT_EQ(lines[1], "job 1 SUCCEEDED in 2m31s: test accuracy 82.00%");
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
      MakeCoordinatorClient("127.0.0.1:1", absl::Seconds(5));
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
  EXPECT_EQ(Cli({"jobs", "-o", "csv"}), kExitUsage);
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

TEST(OutputTest, SummaryIgnoresOtherAttemptsAndCountsRanksAtNewestStep) {
  std::vector<v1::MetricPoint> points;
  auto add = [&](int attempt, int rank, int64_t step, const char* name, double value) {
    v1::MetricPoint p;
    p.set_attempt(attempt);
    p.set_rank(rank);
    p.set_step(step);
    p.set_name(name);
    p.set_value(value);
    points.push_back(p);
  };
  add(1, 0, 500, "loss", 9.0);  // old attempt, higher step
  add(2, 0, 30, "loss", 1.0);
  add(2, 1, 30, "loss", 3.0);
  add(2, 0, 40, "loss", 0.4);  // rank 1 has not reported step 40 yet
  add(2, 0, 40, "images_per_sec", 80.0);
  std::optional<StepSummary> s = SummarizeLatestStep(points, 2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 40);
  EXPECT_EQ(s->ranks, 1);
  EXPECT_DOUBLE_EQ(s->mean_loss, 0.4);
  EXPECT_DOUBLE_EQ(s->images_per_sec, 80.0);
  EXPECT_FALSE(SummarizeLatestStep(points, 3).has_value());

  // Knowing the world size, the newest step every rank reported wins.
  std::optional<StepSummary> full = SummarizeLatestStep(points, 2, /*world_size=*/2);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->step, 30);
  EXPECT_EQ(full->ranks, 2);
  EXPECT_DOUBLE_EQ(full->mean_loss, 2.0);
}

TEST(OutputTest, ProgressLineBeforeMetricsShowsPendingReason) {
  v1::Job job;
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_pending_reason("needs 2 free slots");
  EXPECT_EQ(FormatProgressLine(absl::Seconds(5), job, std::nullopt),
            "[00:05] QUEUED: needs 2 free slots");
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

}  // namespace
}  // namespace tessera::cli
