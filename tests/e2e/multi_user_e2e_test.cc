// Several users on one real cluster (coordinator and worker processes on
// 127.0.0.1): alice's jobs and sweeps are invisible to bob over gRPC, HTTP and
// tessctl, her env values appear in none of bob's views and in no log, and an
// admin token sees and acts on everything. Then fair share: alice's 20 queued
// jobs do not starve bob's 5.
//
// Ranks run as their owner's Unix account, so the test creates throwaway
// accounts for alice and bob and needs root; without it, it skips.
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "tests/e2e/cluster_fixture.h"

namespace tessera {
namespace {

bool RunToEnd(const std::vector<std::string>& argv, const std::string& log) {
  auto p = ChildProcess::Start(argv, log);
  if (!p.ok()) return false;
  std::optional<int> status = (*p)->Wait(absl::Seconds(60));
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

class MultiUserTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    alice_ = absl::StrCat("tsr-al", getpid());
    bob_ = absl::StrCat("tsr-bo", getpid());
    for (const std::string& user : {alice_, bob_}) {
      if (!RunToEnd({"/usr/sbin/useradd", "-M", "-s", "/usr/sbin/nologin", user},
                    "/dev/null")) {
        alice_.clear();
        return;
      }
    }
  }
  static void TearDownTestSuite() {
    for (const std::string& user : {alice_, bob_}) {
      if (!user.empty()) RunToEnd({"/usr/sbin/userdel", user}, "/dev/null");
    }
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "ranks run as their owners' accounts: needs root";
    if (alice_.empty()) GTEST_SKIP() << "cannot create throwaway accounts (useradd)";
    // The ranks, running as alice or bob, open files under the test's tree.
    chmod(dir_.path().c_str(), 0755);
    secret_ = absl::StrCat("s3cr3t-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
    StartCoordinator(
        0, {"--http-port-file", dir_.File("http-port"), "--max-slot-share", "0.5"});
    absl::StatusOr<int> http =
        testing::WaitForPortFile(dir_.File("http-port"), absl::Seconds(30));
    ASSERT_TRUE(http.ok());
    http_port_ = *http;
    alice_token_ = CreateUserToken(alice_, false);
    bob_token_ = CreateUserToken(bob_, false);
    admin_token_ = CreateUserToken(absl::StrCat("tsr-ad", getpid()), true);
    alice_stub_ = StubFor(alice_token_);
    bob_stub_ = StubFor(bob_token_);
    admin_stub_ = StubFor(admin_token_);
  }

  std::string CreateUserToken(const std::string& name, bool admin) {
    std::vector<std::string> argv = {testing::BinDir() + "/tessera-coordinator",
                                     "--db",
                                     dir_.File("tessera.db"),
                                     "token",
                                     "create",
                                     "--name",
                                     name};
    if (admin) argv.push_back("--admin");
    const std::string log = dir_.File("token-" + name + ".out");
    EXPECT_TRUE(RunToEnd(argv, log));
    std::string token = testing::ReadFile(log);
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
      token.pop_back();
    }
    return token;
  }

  std::unique_ptr<v1::JobService::Stub> StubFor(const std::string& token) {
    return v1::JobService::NewStub(
        testing::ChannelWithToken(absl::StrCat("127.0.0.1:", port_), token));
  }

  int64_t SubmitAs(v1::JobService::Stub& stub, const std::string& yaml) {
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(yaml, SpecLimits{});
    EXPECT_TRUE(spec.ok()) << spec.status();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_spec_yaml(yaml);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub.SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  // A short real job: vit-micro on synthetic data, with a secret in its env.
  std::string JobYaml(const std::string& name, int steps) {
    return absl::StrCat("name: ", name, R"(
world_size: 1
env:
  TEAM_API_KEY: )",
                        secret_, R"(
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: )",
                        steps, R"(
  batch_size: 16
  metrics_every: 2
)");
  }

  httplib::Result HttpGet(const std::string& token, const std::string& path) {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_read_timeout(5, 0);
    return client.Get(path.c_str(), {{"Authorization", "Bearer " + token}});
  }
  httplib::Result HttpPost(const std::string& token, const std::string& path) {
    httplib::Client client("127.0.0.1", http_port_);
    return client.Post(path.c_str(), {{"Authorization", "Bearer " + token}}, "",
                       "application/json");
  }

  v1::Job WaitForEndAs(v1::JobService::Stub& stub, int64_t id, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    v1::GetJobResponse resp;
    while (absl::Now() < until) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      if (stub.GetJob(&ctx, req, &resp).ok() &&
          (resp.job().state() == v1::JOB_STATE_SUCCEEDED ||
           resp.job().state() == v1::JOB_STATE_FAILED ||
           resp.job().state() == v1::JOB_STATE_CANCELLED)) {
        return resp.job();
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "job " << id << " did not end\n" << DumpLogs();
    return resp.job();
  }

  static std::string alice_;
  static std::string bob_;
  std::string secret_;
  int http_port_ = 0;
  std::string alice_token_, bob_token_, admin_token_;
  std::unique_ptr<v1::JobService::Stub> alice_stub_, bob_stub_, admin_stub_;
};

std::string MultiUserTest::alice_;
std::string MultiUserTest::bob_;

TEST_F(MultiUserTest, BobCannotSeeOrTouchAlicesJobsAndSweepsButTheAdminCan) {
  StartWorker("w1", port_);
  WaitForWorkers(1);
  const int64_t done = SubmitAs(*alice_stub_, JobYaml("alice-done", 6));
  ASSERT_EQ(WaitForEndAs(*alice_stub_, done, absl::Seconds(120)).state(),
            v1::JOB_STATE_SUCCEEDED);
  // A second job stays queued behind a long one, to be cancelled.
  const int64_t running = SubmitAs(*alice_stub_, JobYaml("alice-long", 100000));
  const int64_t queued = SubmitAs(*alice_stub_, JobYaml("alice-queued", 6));

  // gRPC: every read and action on alice's job is NOT_FOUND for bob.
  auto not_found = [](const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::NOT_FOUND;
  };
  for (int64_t id : {done, running}) {
    grpc::ClientContext c1, c2, c3, c4;
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::GetJobResponse job;
    EXPECT_TRUE(not_found(bob_stub_->GetJob(&c1, get, &job)));
    v1::GetMetricsRequest metrics;
    metrics.set_job_id(id);
    v1::GetMetricsResponse points;
    EXPECT_TRUE(not_found(bob_stub_->GetMetrics(&c2, metrics, &points)));
    v1::GetLogsRequest logs;
    logs.set_job_id(id);
    v1::GetLogsResponse log;
    EXPECT_TRUE(not_found(bob_stub_->GetLogs(&c3, logs, &log)));
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::CancelJobResponse cancelled;
    EXPECT_TRUE(not_found(bob_stub_->CancelJob(&c4, cancel, &cancelled)));
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse list;
    ASSERT_TRUE(bob_stub_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
    EXPECT_EQ(list.jobs_size(), 0) << list.DebugString();
  }

  // HTTP: the same, and the event stream of the job.
  const std::string job_path = absl::StrCat("/api/v1/jobs/", running);
  for (const std::string& path :
       {job_path, job_path + "/metrics", job_path + "/logs?rank=0",
        absl::StrCat("/api/v1/stream/jobs/", running)}) {
    httplib::Result r = HttpGet(bob_token_, path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path << ": " << r->body;
    EXPECT_FALSE(absl::StrContains(r->body, secret_));
  }
  httplib::Result cancel = HttpPost(bob_token_, job_path + "/cancel");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->status, 404);
  httplib::Result list = HttpGet(bob_token_, "/api/v1/jobs");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  EXPECT_FALSE(absl::StrContains(list->body, "alice-")) << list->body;

  // tessctl: not found (exit 3), and an empty list.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"status", absl::StrCat(running)},
                                             {"logs", absl::StrCat(done)},
                                             {"metrics", absl::StrCat(done)},
                                             {"cancel", absl::StrCat(running)}}) {
    Ran ran = Tessctl(bob_token_, args);
    EXPECT_EQ(ran.code, 3) << args[0] << ": " << ran.out;
    EXPECT_FALSE(absl::StrContains(ran.out, secret_));
  }
  Ran jobs = Tessctl(bob_token_, {"jobs", "-o", "json"});
  EXPECT_EQ(jobs.code, 0) << jobs.out;
  EXPECT_FALSE(absl::StrContains(jobs.out, "alice-")) << jobs.out;
  Ran workers = Tessctl(bob_token_, {"workers", "-o", "json"});
  EXPECT_TRUE(absl::StrContains(workers.out, "\"slots_used_by_others\": 1"))
      << workers.out;

  // Alice sees her own, with her secret; her list redacts it.
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest get;
    get.set_job_id(running);
    v1::GetJobResponse job;
    ASSERT_TRUE(alice_stub_->GetJob(&ctx, get, &job).ok());
    EXPECT_EQ(job.job().spec().env().at("TEAM_API_KEY"), secret_);
  }
  Ran mine = Tessctl(alice_token_, {"jobs", "-o", "json"});
  EXPECT_TRUE(absl::StrContains(mine.out, "alice-long")) << mine.out;
  EXPECT_FALSE(absl::StrContains(mine.out, secret_));

  // The admin reads alice's metrics and logs and cancels her jobs.
  {
    grpc::ClientContext c1, c2;
    v1::GetMetricsRequest metrics;
    metrics.set_job_id(done);
    v1::GetMetricsResponse points;
    ASSERT_TRUE(admin_stub_->GetMetrics(&c1, metrics, &points).ok());
    EXPECT_GT(points.points_size(), 0);
    v1::GetLogsRequest logs;
    logs.set_job_id(done);
    v1::GetLogsResponse log;
    ASSERT_TRUE(admin_stub_->GetLogs(&c2, logs, &log).ok());
  }
  Ran admin_cancel = Tessctl(admin_token_, {"cancel", absl::StrCat(queued)});
  EXPECT_EQ(admin_cancel.code, 0) << admin_cancel.out;
  Ran admin_jobs = Tessctl(admin_token_, {"jobs", "--owner", alice_, "-o", "json"});
  EXPECT_TRUE(absl::StrContains(admin_jobs.out, "alice-queued")) << admin_jobs.out;
  httplib::Result admin_cancel_http = HttpPost(admin_token_, job_path + "/cancel");
  ASSERT_TRUE(admin_cancel_http);
  EXPECT_EQ(admin_cancel_http->status, 200) << admin_cancel_http->body;
  EXPECT_EQ(WaitForEndAs(*alice_stub_, running, absl::Seconds(60)).state(),
            v1::JOB_STATE_CANCELLED);

  // Sweeps: bob cannot see alice's; the admin can.
  {
    v1::SubmitSweepRequest req;
    v1::SweepSpec& spec = *req.mutable_spec();
    spec.set_name("alice-study");
    absl::StatusOr<v1::JobSpec> base =
        ParseAndValidateJobSpec(JobYaml("alice-point", 4), SpecLimits{});
    ASSERT_TRUE(base.ok());
    *spec.mutable_base() = *base;
    spec.mutable_grid()->add_world_size(1);
    spec.mutable_grid()->add_batch_size(16);
    grpc::ClientContext ctx;
    v1::SubmitSweepResponse sweep;
    ASSERT_TRUE(alice_stub_->SubmitSweep(&ctx, req, &sweep).ok());
    grpc::ClientContext c1, c2, c3, c4;
    v1::GetSweepRequest get;
    get.set_sweep_id(sweep.sweep_id());
    v1::GetSweepResponse got;
    EXPECT_TRUE(not_found(bob_stub_->GetSweep(&c1, get, &got)));
    v1::CancelSweepRequest cancel_sweep;
    cancel_sweep.set_sweep_id(sweep.sweep_id());
    v1::CancelSweepResponse cancelled;
    EXPECT_TRUE(not_found(bob_stub_->CancelSweep(&c2, cancel_sweep, &cancelled)));
    v1::ListSweepsResponse sweeps;
    ASSERT_TRUE(bob_stub_->ListSweeps(&c3, v1::ListSweepsRequest(), &sweeps).ok());
    EXPECT_EQ(sweeps.sweeps_size(), 0);
    EXPECT_TRUE(admin_stub_->GetSweep(&c4, get, &got).ok());
    httplib::Result http =
        HttpGet(bob_token_, absl::StrCat("/api/v1/sweeps/", sweep.sweep_id()));
    ASSERT_TRUE(http);
    EXPECT_EQ(http->status, 404);
    Ran ctl = Tessctl(admin_token_, {"sweep", "cancel", absl::StrCat(sweep.sweep_id())});
    EXPECT_EQ(ctl.code, 0) << ctl.out;
  }

  // No log holds alice's secret: the coordinator's, the worker's.
  EXPECT_FALSE(absl::StrContains(coordinator_->Log(), secret_));
  for (auto& w : workers_)
    EXPECT_FALSE(absl::StrContains(w->Log(), secret_)) << w->log_path();
}

TEST_F(MultiUserTest, FairShareStartsBobsJobsSoonDespiteAlicesLongQueue) {
  StartWorker("w1", port_);
  StartWorker("w2", port_);
  WaitForWorkers(2);
  std::vector<int64_t> alices;
  for (int i = 0; i < 20; ++i) {
    alices.push_back(SubmitAs(*alice_stub_, JobYaml(absl::StrCat("a", i), 4)));
  }
  // Bob queues once Alice's first two jobs hold both slots.
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (absl::Now() < until) {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse w;
    if (admin_stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &w).ok() &&
        w.workers_size() == 2 &&
        w.workers(0).slots_used() + w.workers(1).slots_used() == 2) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::vector<int64_t> bobs;
  for (int i = 0; i < 5; ++i)
    bobs.push_back(SubmitAs(*bob_stub_, JobYaml(absl::StrCat("b", i), 4)));

  // Wait for the last of Bob's jobs, then order every job by its start (the
  // event that placed it).
  for (int64_t id : bobs) {
    ASSERT_EQ(WaitForEndAs(*bob_stub_, id, absl::Seconds(300)).state(),
              v1::JOB_STATE_SUCCEEDED);
  }
  std::vector<std::pair<int64_t, std::string>> starts;  // (time, owner)
  auto add_starts = [&](const std::vector<int64_t>& ids, const std::string& owner) {
    for (int64_t id : ids) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      v1::GetJobResponse resp;
      ASSERT_TRUE(admin_stub_->GetJob(&ctx, req, &resp).ok());
      for (const v1::JobEvent& e : resp.job().events()) {
        if (e.to_state() == v1::JOB_STATE_SCHEDULED)
          starts.push_back({e.unix_ms(), owner});
      }
    }
  };
  add_starts(alices, "alice");
  add_starts(bobs, "bob");
  std::stable_sort(starts.begin(), starts.end());
  ASSERT_GE(starts.size(), 12u);
  std::vector<std::string> next;
  for (size_t i = 2; i < 12; ++i) next.push_back(starts[i].second);
  const auto first_bob = std::find(next.begin(), next.end(), "bob");
  const long bob_count = std::count(next.begin(), next.end(), "bob");
  std::cout << "FIGURE fair_share_bob_first_start_index=" << (first_bob - next.begin())
            << "\nFIGURE fair_share_bob_starts_of_next_10=" << bob_count << std::endl;
  EXPECT_LT(first_bob - next.begin(), 3);
  EXPECT_GE(bob_count, 4);
  Ran share = Tessctl(admin_token_, {"share"});
  EXPECT_TRUE(absl::StrContains(share.out, alice_) && absl::StrContains(share.out, bob_))
      << share.out;
  Ran own = Tessctl(bob_token_, {"share"});
  EXPECT_FALSE(absl::StrContains(own.out, alice_)) << own.out;
  // Alice's remaining queue is not needed.
  for (int64_t id : alices) Tessctl(alice_token_, {"cancel", absl::StrCat(id)});
}

}  // namespace
}  // namespace tessera
