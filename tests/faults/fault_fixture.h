// FaultTest: a fixture that runs a real Tessera cluster across network
// namespaces (coordinator in "c", workers in "w1" and "w2"; see
// netns_cluster.h) and talks to the coordinator through the generated stubs
// over the host's leg on the bridge. Shared by the fault test files.
//
// Sizes come from the environment so that CI runs a short version and
// scripts/faults/campaign.sh the long one (see tests/faults/README.md):
// TESSERA_FAULT_PARTITIONS, TESSERA_FAULT_DOWNTIMES, TESSERA_FAULT_KILLS,
// TESSERA_FAULT_SEED; TESSERA_FAULT_LOG_DIR keeps the logs. Each test prints its
// measurements as lines "FAULT-FIGURE <test> <key>=<value>" on stdout.
#ifndef TESSERA_TESTS_FAULTS_FAULT_FIXTURE_H_
#define TESSERA_TESTS_FAULTS_FAULT_FIXTURE_H_

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "health.grpc.pb.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/faults/netns_cluster.h"
#include "tests/faults/rank_census.h"
#include "tests/testing/grpc_auth.h"
#include "tests/testing/test_util.h"

namespace tessera::faults {

namespace v1 = ::tessera::v1;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;

// An integer knob from the environment; `fallback` when unset or malformed.
inline int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  int out = 0;
  return v != nullptr && absl::SimpleAtoi(v, &out) ? out : fallback;
}

// A comma-separated list of integers from the environment.
inline std::vector<int> EnvIntList(const char* name, std::vector<int> fallback) {
  const char* v = getenv(name);
  if (v == nullptr) return fallback;
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n)) return fallback;
    out.push_back(n);
  }
  return out;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2]
                           : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

inline double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The job the fault tests run: ViT-micro on synthetic data, one thread per rank.
struct JobOptions {
  std::string name = "fault";
  int world_size = 2;
  int max_restarts = 0;
  int64_t max_steps = 200;
  int metrics_every = 5;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;
  int nodes = 0;     // exactly this many workers (0: any)
  int per_node = 0;  // exactly this many ranks per worker (0: any)
};

inline std::string JobYaml(const JobOptions& o) {
  std::string yaml = absl::StrCat("name: ", o.name, "\nworld_size: ", o.world_size,
                                  "\nmax_restarts: ", o.max_restarts, "\n");
  if (o.nodes > 0) absl::StrAppend(&yaml, "nodes: ", o.nodes, "\n");
  if (o.per_node > 0) absl::StrAppend(&yaml, "per_node: ", o.per_node, "\n");
  absl::StrAppend(&yaml, "trainer:\n  model: vit-micro\n  dataset: synthetic\n",
                  "  epochs: 1000\n  max_steps: ", o.max_steps,
                  "\n  batch_size: 16\n  train_subset: 512\n  test_subset: 64\n",
                  "  metrics_every: ", o.metrics_every, "\n  threads: 1\n");
  if (!o.checkpoint_dir.empty()) {
    absl::StrAppend(&yaml, "  checkpoint_dir: ", o.checkpoint_dir,
                    "\n  checkpoint_every: ", o.checkpoint_every, "\n");
  }
  return yaml;
}

class FaultTest : public ::testing::Test {
 protected:
  // Inside its own namespace the coordinator may always use the same port.
  static constexpr int kPort = 50051;
  // Fast failure detection, so that a partition is noticed within seconds.
  static constexpr int kHeartbeatMs = 200;
  static constexpr int kSuspectMs = 1000;
  static constexpr int kDeadMs = 3000;
  static constexpr int kKillGraceMs = 3000;

  void SetUp() override {
    absl::Status supported = NetnsCluster::CheckSupported(dir_.path());
    if (!supported.ok()) GTEST_SKIP() << supported.message();
    sqlite3_ = FindProgram("sqlite3");
    if (sqlite3_.empty()) {
      GTEST_SKIP() << "fault tests check the database with the sqlite3 CLI "
                      "(Debian package sqlite3)";
    }
    absl::StatusOr<std::unique_ptr<NetnsCluster>> net =
        NetnsCluster::Create({"c", "w1", "w2"}, dir_.path());
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = std::move(*net);
    db_path_ = dir_.File("tessera.db");
  }

  // Stops the daemons (workers first, so that they stop their ranks), then
  // removes the namespaces and any mount.
  void TearDown() override {
    for (auto& [name, w] : workers_) {
      if (!w->Running()) continue;
      w->Signal(SIGTERM);
      EXPECT_TRUE(w->Wait(absl::Seconds(20)).has_value()) << name << " ignored SIGTERM";
    }
    workers_.clear();
    if (coordinator_ != nullptr && coordinator_->Running()) {
      coordinator_->Signal(SIGTERM);
      EXPECT_TRUE(coordinator_->Wait(absl::Seconds(20)).has_value())
          << "coordinator ignored SIGTERM";
    }
    coordinator_.reset();
    net_.reset();
    for (const std::string& m : mounts_) umount2(m.c_str(), MNT_DETACH);
    KeepLogs();
  }

  // With TESSERA_FAULT_LOG_DIR set, copies the daemons' logs (and the rank
  // logs) there as <test>/<file>, for looking into a campaign afterwards.
  void KeepLogs() {
    const char* keep = getenv("TESSERA_FAULT_LOG_DIR");
    if (keep == nullptr || *keep == '\0') return;
    const std::string to = absl::StrCat(
        keep, "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::error_code ec;
    std::filesystem::create_directories(to, ec);
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(dir_.path(), ec)) {
      if (entry.path().extension() != ".log") continue;
      std::string name =
          std::filesystem::relative(entry.path(), dir_.path(), ec).string();
      std::replace(name.begin(), name.end(), '/', '_');
      std::filesystem::copy_file(entry.path(), to + "/" + name,
                                 std::filesystem::copy_options::overwrite_existing, ec);
    }
  }

  std::string CoordinatorAddress() const {
    return absl::StrCat(net_->Address("c"), ":", kPort);
  }
  std::string WorkerLog(const std::string& name) const {
    return dir_.File(name + ".log");
  }
  std::string CoordinatorLog() const {
    return dir_.File(absl::StrCat("coordinator-", coordinator_starts_, ".log"));
  }

  // Creates a user token (for this test's calls) and a join token (for the
  // workers) in the database, once, and the channel that carries the user token.
  void EnsureTokens() {
    if (jobs_ != nullptr) return;
    auto create = [this](const std::string& kind) -> absl::StatusOr<std::string> {
      absl::StatusOr<std::string> out =
          RunCommand({testing::BinDir() + "/tessera-coordinator", "--db", db_path_,
                      "token", "create", "--kind", kind, "--name",
                      // Jobs run as the account their token names; these
                      // tests run as root, with --allow-root-jobs workers.
                      kind == "user" ? std::string("root") : "faults-" + kind},
                     dir_.path());
      if (!out.ok()) return out.status();
      return std::string(absl::StripAsciiWhitespace(*out));
    };
    absl::StatusOr<std::string> user = create("user");
    ASSERT_TRUE(user.ok()) << user.status();
    absl::StatusOr<std::string> join = create("join");
    ASSERT_TRUE(join.ok()) << join.status();
    std::ofstream(dir_.File("join-token")) << *join << "\n";
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
    channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
        CoordinatorAddress(), grpc::InsecureChannelCredentials(), args,
        testing::BearerInterceptors(*user));
    jobs_ = v1::JobService::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
  }

  // Starts the coordinator in "c" and waits until it answers.
  void StartCoordinator() {
    ASSERT_NO_FATAL_FAILURE(EnsureTokens());
    std::filesystem::remove(dir_.File("port"));
    ++coordinator_starts_;
    std::vector<std::string> argv = {testing::BinDir() + "/tessera-coordinator",
                                     "--listen",
                                     absl::StrCat("0.0.0.0:", kPort),
                                     "--http",
                                     "127.0.0.1:0",
                                     "--db",
                                     db_path_,
                                     "--port-file",
                                     dir_.File("port"),
                                     "--heartbeat-interval-ms",
                                     absl::StrCat(kHeartbeatMs),
                                     "--worker-suspect-after-ms",
                                     absl::StrCat(suspect_ms_),
                                     "--worker-dead-after-ms",
                                     absl::StrCat(dead_ms_)};
    argv.insert(argv.end(), coordinator_flags_.begin(), coordinator_flags_.end());
    auto c = ChildProcess::Start(net_->InNode("c", argv), CoordinatorLog());
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    absl::StatusOr<int> port =
        testing::WaitForPortFile(dir_.File("port"), absl::Seconds(60));
    ASSERT_TRUE(port.ok()) << testing::ReadFile(CoordinatorLog());
    ASSERT_TRUE(WaitUntil(
        [&] {
          grpc::ClientContext ctx;
          Deadline(ctx, absl::Seconds(2));
          v1::ListWorkersResponse resp;
          return jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok();
        },
        absl::Seconds(30)))
        << "coordinator does not answer at " << CoordinatorAddress();
  }

  // SIGKILL, as a crash would; waits until it is gone.
  void KillCoordinator() {
    coordinator_->Signal(SIGKILL);
    ASSERT_TRUE(coordinator_->Wait(absl::Seconds(20)).has_value());
  }

  void StartWorker(const std::string& name, int slots) {
    std::vector<std::string> argv = {testing::BinDir() + "/tessera-worker",
                                     "--coordinator",
                                     CoordinatorAddress(),
                                     "--name",
                                     name,
                                     "--cpu-slots",
                                     absl::StrCat(slots),
                                     "--work-dir",
                                     dir_.File("work-" + name),
                                     "--state-dir",
                                     dir_.File("state-" + name),
                                     "--kill-grace-ms",
                                     absl::StrCat(kKillGraceMs),
                                     "--drain-timeout",
                                     "5",
                                     "--join-token-file",
                                     dir_.File("join-token"),
                                     "--no-cgroups",
                                     "--allow-root-jobs",
                                     "--data-root",
                                     "/usr/share/datasets",
                                     "--data-root",
                                     dir_.path(),
                                     "--checkpoint-root",
                                     dir_.path()};
    auto w = ChildProcess::Start(net_->InNode(name, argv), WorkerLog(name));
    ASSERT_TRUE(w.ok()) << w.status();
    workers_[name] = std::move(*w);
  }

  // The coordinator and both workers, each in its namespace.
  void StartCluster(int slots_per_worker) {
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    ASSERT_NO_FATAL_FAILURE(StartWorker("w1", slots_per_worker));
    ASSERT_NO_FATAL_FAILURE(StartWorker("w2", slots_per_worker));
    ASSERT_TRUE(WaitUntil([&] { return AliveWorkers() == 2; }, absl::Seconds(30)))
        << "workers did not register\n"
        << DumpLogs();
  }

  static void Deadline(grpc::ClientContext& ctx, absl::Duration d) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + d));
  }

  // Polls `done` until it holds or `timeout` passes.
  static bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
                        absl::Duration poll = absl::Milliseconds(100)) {
    const absl::Time until = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > until) return false;
      absl::SleepFor(poll);
    }
    return true;
  }

  absl::StatusOr<int64_t> Submit(const JobOptions& options,
                                 const std::string& request_id = "") {
    const std::string yaml = JobYaml(options);
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(yaml, SpecLimits{});
    if (!spec.ok()) return spec.status();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_spec_yaml(yaml);
    req.set_client_request_id(request_id);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(10));
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          s.error_message());
    }
    return resp.job_id();
  }

  // The job, or an empty one (id 0) when the call fails.
  v1::Job GetJob(int64_t id) {
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(10));
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    if (!jobs_->GetJob(&ctx, req, &resp).ok()) return v1::Job();
    return resp.job();
  }

  bool Cancel(int64_t id) {
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(10));
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    return jobs_->CancelJob(&ctx, req, &resp).ok();
  }

  std::vector<v1::Worker> Workers() {
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(5));
    v1::ListWorkersResponse resp;
    if (!jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) return {};
    return {resp.workers().begin(), resp.workers().end()};
  }

  int AliveWorkers() {
    int alive = 0;
    for (const v1::Worker& w : Workers()) alive += w.alive() ? 1 : 0;
    return alive;
  }

  // The worker's session epoch (-1 when unknown).
  int64_t Epoch(const std::string& name) {
    for (const v1::Worker& w : Workers()) {
      if (w.name() == name) return w.epoch();
    }
    return -1;
  }

  // Points named `name` of every attempt (empty when the call fails).
  std::vector<v1::MetricPoint> Points(int64_t id, const std::string& name,
                                      int64_t after_step = 0) {
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(20));
    v1::GetMetricsRequest req;
    req.set_job_id(id);
    req.set_name(name);
    req.set_after_step(after_step);
    req.set_limit(100000);
    v1::GetMetricsResponse resp;
    if (!jobs_->GetMetrics(&ctx, req, &resp).ok()) return {};
    return {resp.points().begin(), resp.points().end()};
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    grpc::ClientContext ctx;
    Deadline(ctx, absl::Seconds(2));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    if (!health_->Check(&ctx, req, &resp).ok()) {
      return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    }
    return resp.status();
  }

  // Waits until the job is RUNNING and each of its ranks has reported a loss.
  void WaitForTraining(int64_t id, int world_size, absl::Duration timeout) {
    const bool ok = WaitUntil(
        [&] {
          if (GetJob(id).state() != v1::JOB_STATE_RUNNING) return false;
          std::set<int32_t> ranks;
          for (const v1::MetricPoint& p : Points(id, "loss")) ranks.insert(p.rank());
          return static_cast<int>(ranks.size()) >= world_size;
        },
        timeout, absl::Milliseconds(200));
    ASSERT_TRUE(ok) << "job " << id << " did not start training\n" << DumpLogs();
  }

  v1::Job WaitForEnd(int64_t id, absl::Duration timeout) {
    v1::Job job;
    const bool ended = WaitUntil(
        [&] {
          job = GetJob(id);
          return job.state() == v1::JOB_STATE_SUCCEEDED ||
                 job.state() == v1::JOB_STATE_FAILED ||
                 job.state() == v1::JOB_STATE_CANCELLED;
        },
        timeout, absl::Milliseconds(250));
    EXPECT_TRUE(ended) << "job " << id << " did not end; last state "
                       << v1::JobState_Name(job.state()) << "\n"
                       << DumpLogs();
    return job;
  }

  // Runs `sql` with the sqlite3 CLI on `db` (read-only); the output, trimmed.
  absl::StatusOr<std::string> Sql(const std::string& db, const std::string& sql) {
    absl::StatusOr<std::string> out =
        RunCommand({sqlite3_, "-readonly", "-batch", db, sql}, dir_.path());
    if (!out.ok()) return out.status();
    return std::string(absl::StripAsciiWhitespace(*out));
  }

  // Copies the (stopped) coordinator's database and WAL into a fresh
  // directory; returns the copy's path. Checks run on the copy, so that their
  // own WAL recovery does not touch the file the next coordinator opens.
  absl::StatusOr<std::string> CopyDatabase() {
    const std::string dir = dir_.File(absl::StrCat("copy-", ++copies_));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string copy = dir + "/tessera.db";
    std::filesystem::copy_file(db_path_, copy, ec);
    if (ec) return absl::InternalError("cannot copy the database: " + ec.message());
    if (std::filesystem::exists(db_path_ + "-wal")) {
      std::filesystem::copy_file(db_path_ + "-wal", copy + "-wal", ec);
      if (ec) return absl::InternalError("cannot copy the WAL: " + ec.message());
    }
    return copy;
  }

  // PRAGMA integrity_check on the database at `path`: "ok" when intact.
  absl::StatusOr<std::string> IntegrityCheck(const std::string& path) {
    absl::StatusOr<std::string> out =
        RunCommand({sqlite3_, "-batch", path, "PRAGMA integrity_check;"}, dir_.path());
    if (!out.ok()) return out.status();
    return std::string(absl::StripAsciiWhitespace(*out));
  }

  // Prints a measurement for scripts/faults/campaign.sh and records it in the
  // test's XML/JSON output.
  void Figure(const std::string& key, const std::string& value) {
    const std::string test =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::cout << "FAULT-FIGURE " << test << " " << key << "=" << value << std::endl;
    RecordProperty(key, value);
  }
  void Figure(const std::string& key, double value) { Figure(key, absl::StrCat(value)); }

  // The tail of the daemons' logs, for failure messages.
  std::string DumpLogs() {
    auto tail = [](const std::string& path) {
      std::string text = testing::ReadFile(path);
      if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
      return "--- " + path + " ---\n" + text;
    };
    std::string out = tail(CoordinatorLog());
    for (const auto& [name, w] : workers_) out += tail(WorkerLog(name));
    return out;
  }

  // The coordinator's thresholds; a test may change them before starting it.
  int suspect_ms_ = kSuspectMs;
  int dead_ms_ = kDeadMs;
  // More coordinator flags (e.g. --trainer-lease-ms); set before starting it.
  std::vector<std::string> coordinator_flags_;
  TempDir dir_;
  std::string sqlite3_;
  std::unique_ptr<NetnsCluster> net_;
  std::string db_path_;
  std::vector<std::string> mounts_;  // unmounted in TearDown
  int coordinator_starts_ = 0;
  int copies_ = 0;
  std::unique_ptr<ChildProcess> coordinator_;
  std::map<std::string, std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace tessera::faults

#endif  // TESSERA_TESTS_FAULTS_FAULT_FIXTURE_H_
