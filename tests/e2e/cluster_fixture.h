// ClusterTest: a fixture that runs a real tessera-coordinator and
// tessera-worker daemons on 127.0.0.1 and talks to them through the generated
// gRPC client classes and the real tessctl binary. Shared by the end-to-end
// test files.
#ifndef TESSERA_TESTS_E2E_CLUSTER_FIXTURE_H_
#define TESSERA_TESTS_E2E_CLUSTER_FIXTURE_H_

#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/testing/grpc_auth.h"
#include "tests/testing/test_util.h"

namespace tessera {

namespace v1 = ::tessera::v1;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;

// The account this process runs as: workers that run as root run a job's
// ranks as the account named by its owner, the submitting token's name.
inline std::string CurrentUserName() {
  const passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "root";
}

class ClusterTest : public ::testing::Test {
 protected:
  // Creates a user and a join token in the cluster's database, once; the
  // database outlives coordinator restarts, and so do the tokens.
  // `coordinator_flags` go before `token create` (e.g. --tls-self-signed).
  void EnsureTokens(const std::vector<std::string>& coordinator_flags = {}) {
    if (!user_token_.empty()) return;
    auto create = [this, &coordinator_flags](const std::string& kind) {
      const std::string log = dir_.File("token-" + kind + ".out");
      std::vector<std::string> argv = {testing::BinDir() + "/tessera-coordinator", "--db",
                                       dir_.File("tessera.db")};
      argv.insert(argv.end(), coordinator_flags.begin(), coordinator_flags.end());
      for (const std::string& arg :
           {std::string("token"), std::string("create"), std::string("--kind"), kind,
            std::string("--name"), kind == "user" ? CurrentUserName() : "e2e-" + kind}) {
        argv.push_back(arg);
      }
      auto p = ChildProcess::Start(argv, log);
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return std::string();
      std::optional<int> status = (*p)->Wait(absl::Seconds(30));
      EXPECT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << (*p)->Log();
      std::string token = (*p)->Log();
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
        token.pop_back();
      }
      return token;
    };
    user_token_ = create("user");
    join_token_ = create("join");
    std::ofstream(dir_.File("join-token")) << join_token_ << "\n";
  }

  void StartCoordinator(int port = 0, std::vector<std::string> extra = {}) {
    EnsureTokens();
    std::string listen = absl::StrCat("127.0.0.1:", port);
    std::filesystem::remove(dir_.File("port"));
    std::vector<std::string> argv = {testing::BinDir() + "/tessera-coordinator",
                                     "--listen",
                                     listen,
                                     "--db",
                                     dir_.File("tessera.db"),
                                     "--port-file",
                                     dir_.File("port"),
                                     "--http",
                                     "127.0.0.1:0",
                                     "--heartbeat-interval-ms",
                                     "200"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = ChildProcess::Start(argv, dir_.File("coordinator.log"));
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    absl::StatusOr<int> bound =
        testing::WaitForPortFile(dir_.File("port"), absl::Seconds(30));
    ASSERT_TRUE(bound.ok()) << coordinator_->Log();
    port_ = *bound;
    channel_ = testing::ChannelWithToken(absl::StrCat("127.0.0.1:", port_), user_token_);
    jobs_ = v1::JobService::NewStub(channel_);
  }

  void StartWorker(const std::string& name, int port,
                   std::vector<std::string> extra = {}) {
    EnsureTokens();  // a worker may start before its coordinator
    std::vector<std::string> argv = {
        testing::BinDir() + "/tessera-worker", "--coordinator",
        absl::StrCat("127.0.0.1:", port), "--name", name, "--cpu-slots", "1",
        "--work-dir", dir_.File("work-" + name), "--state-dir",
        dir_.File("state-" + name), "--kill-grace-ms", "3000",
        // SIGTERM drains first; TearDown waits 20 s.
        "--drain-timeout", "10", "--join-token-file", dir_.File("join-token")};
    // Tests run as root in CI: their jobs, owned by root (the user token is
    // named after this process's account), may run as root. Specs read and
    // write under the test's directory.
    argv.insert(argv.end(),
                {"--allow-root-jobs", "--data-root", "/usr/share/datasets", "--data-root",
                 dir_.path(), "--checkpoint-root", dir_.path()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto w = ChildProcess::Start(argv, dir_.File(name + ".log"));
    ASSERT_TRUE(w.ok()) << w.status();
    workers_.push_back(std::move(*w));
  }

  // Waits until `n` live workers are registered.
  void WaitForWorkers(int n) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until) {
      grpc::ClientContext ctx;
      v1::ListWorkersResponse resp;
      if (jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) {
        int alive = 0;
        for (const auto& w : resp.workers()) alive += w.alive() ? 1 : 0;
        if (alive >= n) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "workers did not register";
  }

  v1::Job Get(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    grpc::Status s = jobs_->GetJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job();
  }

  // Waits until the job is RUNNING and every rank has reported a metric.
  void WaitForTraining(int64_t id, int world_size, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      if (Get(id).state() == v1::JOB_STATE_RUNNING) {
        std::set<int32_t> ranks;
        for (const auto& p : Metrics(id)) ranks.insert(p.rank());
        if (static_cast<int>(ranks.size()) >= world_size) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    FAIL() << "job " << id << " did not start training\n" << DumpLogs();
  }

  // Waits until some rank of job `id` has reported a metric at `step` or
  // later (of `attempt`; 0: any attempt). On timeout the test fails with what
  // it waited for: the job's state, its events, the highest step reached and
  // the logs.
  bool WaitForStep(int64_t id, int64_t step, absl::Duration timeout,
                   int32_t attempt = 0) {
    const absl::Time until = absl::Now() + timeout;
    int64_t reached = -1;
    while (absl::Now() < until) {
      for (const auto& p : Metrics(id)) {
        if (attempt == 0 || p.attempt() == attempt) reached = std::max(reached, p.step());
      }
      if (reached >= step) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const v1::Job job = Get(id);
    std::string events;
    for (const v1::JobEvent& e : job.events()) {
      absl::StrAppend(&events, "  ", v1::JobState_Name(e.from_state()), " -> ",
                      v1::JobState_Name(e.to_state()), ": ", e.reason(), "\n");
    }
    ADD_FAILURE() << "job " << id << " did not reach step " << step << " within "
                  << timeout << " (highest step " << reached << "); state "
                  << v1::JobState_Name(job.state()) << " (" << job.reason()
                  << "), events:\n"
                  << events << DumpLogs();
    return false;
  }

  // Trainer processes of this cluster's job `id`, found by scanning /proc.
  std::vector<pid_t> TrainerPids(int64_t id) {
    return testing::FindProcesses(
        {absl::StrCat("--coordinator=127.0.0.1:", port_), absl::StrCat("--job-id=", id)});
  }

  int64_t Submit(const std::string& yaml) {
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(yaml, SpecLimits{});
    EXPECT_TRUE(spec.ok()) << spec.status();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_spec_yaml(yaml);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  v1::Job WaitForEnd(int64_t id, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    v1::Job job;
    while (absl::Now() < until) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      v1::GetJobResponse resp;
      if (jobs_->GetJob(&ctx, req, &resp).ok()) {
        job = resp.job();
        if (job.state() == v1::JOB_STATE_SUCCEEDED ||
            job.state() == v1::JOB_STATE_FAILED ||
            job.state() == v1::JOB_STATE_CANCELLED) {
          return job;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    ADD_FAILURE() << "job " << id << " did not finish; last state "
                  << v1::JobState_Name(job.state()) << "\n"
                  << DumpLogs();
    return job;
  }

  std::string DumpLogs() {
    std::string out = "--- coordinator ---\n" + coordinator_->Log();
    for (auto& w : workers_) out += "--- " + w->log_path() + " ---\n" + w->Log();
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
      if (entry.path().extension() == ".log" &&
          entry.path().string().find("rank-") != std::string::npos) {
        out += "--- " + entry.path().string() + " ---\n" +
               testing::ReadFile(entry.path().string());
      }
    }
    return out;
  }

  // What one tessctl run printed (stdout and stderr together) and its exit
  // code (-1: it did not start, or did not exit within 30 s).
  struct Ran {
    int code = -1;
    std::string out;
  };

  // Runs the real tessctl against this cluster with the user token; its
  // output is also kept in dir_/tessctl-N.out.
  Ran Tessctl(std::vector<std::string> args) {
    return Tessctl(user_token_, std::move(args));
  }

  // Likewise, as the holder of `token`.
  Ran Tessctl(const std::string& token, std::vector<std::string> args) {
    const std::string log = dir_.File(absl::StrCat("tessctl-", ++tessctl_runs_, ".out"));
    std::vector<std::string> argv = {testing::BinDir() + "/tessctl", "--coordinator",
                                     absl::StrCat("127.0.0.1:", port_), "--token", token};
    argv.insert(argv.end(), args.begin(), args.end());
    Ran ran;
    auto p = ChildProcess::Start(argv, log);
    if (!p.ok()) return ran;
    std::optional<int> status = (*p)->Wait(absl::Seconds(30));
    if (status && WIFEXITED(*status)) ran.code = WEXITSTATUS(*status);
    ran.out = (*p)->Log();
    return ran;
  }

  std::vector<v1::MetricPoint> Metrics(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetMetricsRequest req;
    req.set_job_id(id);
    v1::GetMetricsResponse resp;
    EXPECT_TRUE(jobs_->GetMetrics(&ctx, req, &resp).ok());
    return {resp.points().begin(), resp.points().end()};
  }

  // SIGTERM every daemon and check each stops cleanly.
  void TearDown() override {
    for (auto& w : workers_) {
      w->Signal(SIGTERM);
      std::optional<int> status = w->Wait(absl::Seconds(20));
      ASSERT_TRUE(status.has_value()) << "worker did not stop on SIGTERM";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << w->Log();
    }
    if (coordinator_ != nullptr) {
      coordinator_->Signal(SIGTERM);
      std::optional<int> status = coordinator_->Wait(absl::Seconds(20));
      ASSERT_TRUE(status.has_value()) << "coordinator did not stop on SIGTERM";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << coordinator_->Log();
    }
  }

  TempDir dir_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  int port_ = 0;
  std::string user_token_;  // for tessctl-side calls
  std::string join_token_;  // in dir_/join-token, for workers
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  int tessctl_runs_ = 0;  // numbers the tessctl-N.out files
};

}  // namespace tessera

#endif  // TESSERA_TESTS_E2E_CLUSTER_FIXTURE_H_
