// Tessera inside Slurm, end to end against a real slurmctld and slurmd
// (Debian's slurm-wlm, started by the test on this host): a coordinator with
// a Slurm pool and no static workers submits an allocation for a queued job,
// workers start inside it and register, the job runs there, and the idle
// allocation is given back; `scancel --signal=USR1` (a preemption notice)
// drains the allocation's worker and the job resumes from its checkpoint on a
// new allocation; a coordinator killed while an idle allocation runs
// cancels it and revokes its join credential once restarted; one that died
// before storing an allocation revokes its credential once restarted, and the
// allocation's worker exits so that the allocation ends. Needs root; skips otherwise,
// except under TESSERA_REQUIRE_SLURM=1 (.ci/run), where a skip is a failure.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/slurm_cluster.h"

namespace tessera {
namespace {

using ::tessera::testing::SlurmCluster;
using ::testing::HasSubstr;

class SlurmE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    if (absl::Status s = SlurmCluster::CheckSupported(); !s.ok()) {
      if (SlurmCluster::Required()) GTEST_FAIL() << s.message();
      GTEST_SKIP() << s.message();
    }
    absl::StatusOr<std::unique_ptr<SlurmCluster>> cluster = SlurmCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    slurm_ = *std::move(cluster);
  }

  void TearDown() override {
    ClusterTest::TearDown();
    if (slurm_ != nullptr) EXPECT_TRUE(slurm_->Stop().ok());
  }

  // A coordinator whose only workers come from one Slurm pool "cpu": one
  // node with 2 CPU slots per allocation, given back after `idle_timeout`.
  // The workers' directories are under the test's own: two tests' clusters
  // both number their first allocation 1.
  void StartWithPool(const std::string& idle_timeout = "5s") {
    const std::string pools = dir_.File("pools.yaml");
    std::ofstream(pools) << absl::StrCat(R"(pools:
  - name: cpu
    partition: )",
                                         slurm_->partition(), R"(
    cpus_per_node: 2
    max_nodes: 1
    time_limit: 30m
    idle_timeout: )",
                                         idle_timeout, R"(
    register_timeout: 60s
    submit_as: service
    output: )",
                                         slurm_->dir(), R"(/alloc-%j.out
    node_dir: )",
                                         dir_.path(), R"(
    worker:
      path: )",
                                         testing::BinDir(), R"(/tessera-worker
      args: ["--allow-root-jobs", "--no-cgroups", "--kill-grace-ms", "3000",
             "--data-root", "/usr/share/datasets", "--data-root", ")",
                                         dir_.path(), R"(", "--checkpoint-root", ")",
                                         dir_.path(), R"("]
)");
    pool_flags_ = {"--slurm-pools",          pools,
                   "--slurm-conf",           slurm_->conf_path(),
                   "--slurm-credential-dir", dir_.File("slurm-credentials")};
    StartCoordinator(0, pool_flags_);
  }

  // The join credentials the coordinator has written and not yet removed.
  std::vector<std::filesystem::path> TokenFiles() {
    std::vector<std::filesystem::path> files;
    for (const auto& e :
         std::filesystem::directory_iterator(dir_.File("slurm-credentials"))) {
      if (e.path().extension() == ".token") files.push_back(e.path());
    }
    return files;
  }

  // Registers a worker named `name` with the join token `token`, as a worker
  // started inside an allocation does.
  grpc::Status RegisterWithJoinToken(const std::string& token, const std::string& name) {
    auto stub = v1::WorkerService::NewStub(
        testing::ChannelWithToken(absl::StrCat("127.0.0.1:", port_), token));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_slots(1);
    v1::RegisterWorkerResponse resp;
    return stub->RegisterWorker(&ctx, req, &resp);
  }

  // Slurm job ids squeue lists (any state but the final ones).
  std::vector<std::string> Allocations() {
    absl::StatusOr<std::string> out = slurm_->Run({"squeue", "-h", "-o", "%i"});
    if (!out.ok()) return {};
    std::vector<std::string> ids;
    for (absl::string_view line : absl::StrSplit(*out, '\n', absl::SkipWhitespace())) {
      ids.emplace_back(absl::StripAsciiWhitespace(line));
    }
    return ids;
  }

  // The registered worker running job `id`'s rank 0, with its Slurm job id.
  v1::Worker WorkerOfRank0(int64_t id) {
    const v1::Job job = Get(id);
    if (job.ranks_size() == 0) return {};
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    if (!jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) return {};
    for (const v1::Worker& w : resp.workers()) {
      if (w.name() == job.ranks(0).worker()) return w;
    }
    return {};
  }

  std::unique_ptr<SlurmCluster> slurm_;
  std::vector<std::string> pool_flags_;  // the coordinator's Slurm flags
};

std::string Job(const std::string& name, int64_t steps, const std::string& extra) {
  return absl::StrCat("name: ", name, R"(
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1000
  max_steps: )",
                      steps, R"(
  batch_size: 16
  train_subset: 4096
  test_subset: 64
  metrics_every: 5
  threads: 1
)",
                      extra);
}

TEST_F(SlurmE2eTest, QueuedJobGetsAnAllocationRunsOnItAndTheIdleAllocationIsGivenBack) {
  StartWithPool();
  const absl::Time submitted = absl::Now();
  const int64_t id = Submit(Job("slurm-e2e", 30, ""));

  // What a new user sees while the allocation is pending or starting.
  std::string pending;
  for (int i = 0; i < 300 && pending.empty(); ++i) {
    const v1::Job job = Get(id);
    if (absl::StrContains(job.pending_reason(), "Slurm allocation")) {
      pending = job.pending_reason();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(pending.empty()) << DumpLogs() << slurm_->DaemonLogs();
  std::printf("NOTE pending_reason=\"%s\"\n", pending.c_str());
  const std::vector<std::string> allocations = Allocations();
  ASSERT_EQ(allocations.size(), 1u) << slurm_->DaemonLogs();
  const std::string allocation = allocations[0];
  EXPECT_THAT(pending,
              HasSubstr(absl::StrCat("waiting for Slurm allocation ", allocation)));

  // The job runs on the allocation's worker.
  absl::Time running_at = absl::InfiniteFuture();
  for (int i = 0; i < 1200 && running_at == absl::InfiniteFuture(); ++i) {
    if (Get(id).state() == v1::JOB_STATE_RUNNING) running_at = absl::Now();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(running_at, absl::InfiniteFuture()) << DumpLogs() << slurm_->DaemonLogs();
  std::printf("FIGURE slurm_submit_to_running_s=%.1f\n",
              absl::ToDoubleSeconds(running_at - submitted));
  // The allocation's join credential, in a file of its own.
  const std::filesystem::path credentials = dir_.File("slurm-credentials");
  auto token_files = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(credentials)) {
      n += e.path().extension() == ".token";
    }
    return n;
  };
  EXPECT_EQ(token_files(), 1);
  const v1::Worker worker = WorkerOfRank0(id);
  EXPECT_EQ(worker.pool(), "cpu");
  EXPECT_EQ(worker.slurm_job_id(), allocation);
  // tessctl status shows the allocation behind the job.
  EXPECT_THAT(Get(id).slurm_allocation(),
              HasSubstr(absl::StrCat(allocation, " in pool cpu (R)")));

  const v1::Job job = WaitForEnd(id, absl::Minutes(3));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();

  // Idle for the pool's 5 s: the allocation is cancelled.
  const absl::Time ended = absl::Now();
  absl::Status gone =
      slurm_->WaitForJobState(allocation, {"CA", "CD", ""}, absl::Minutes(1));
  EXPECT_TRUE(gone.ok()) << gone << "\n" << DumpLogs();
  std::printf("FIGURE slurm_idle_to_released_s=%.1f\n",
              absl::ToDoubleSeconds(absl::Now() - ended));

  // Once the coordinator sees it ended, the allocation's join credential is
  // revoked and its file removed.
  for (int i = 0; i < 300 && token_files() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(token_files(), 0) << DumpLogs();
}

TEST_F(SlurmE2eTest, PreemptionNoticeDrainsTheAllocationAndTheJobResumesOnANewOne) {
  StartWithPool();
  const std::string ckpt = dir_.File("ckpt-slurm");
  const int64_t id = Submit(
      Job("slurm-preempt", 300,
          absl::StrCat("  checkpoint_every: 100000\n  checkpoint_dir: ", ckpt, "\n")));
  WaitForTraining(id, 2, absl::Minutes(3));
  ASSERT_TRUE(WaitForStep(id, 30, absl::Minutes(2))) << slurm_->DaemonLogs();
  const std::string first = WorkerOfRank0(id).slurm_job_id();
  ASSERT_FALSE(first.empty());

  // Slurm's warning before a preemption or the time limit.
  ASSERT_TRUE(slurm_->Run({"scancel", "--signal=USR1", first}).ok());
  const v1::Job job = WaitForEnd(id, absl::Minutes(4));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.preemptions(), 1);
  bool preempted = false;
  for (const v1::JobEvent& e : job.events()) {
    preempted |= absl::StrContains(e.reason(), "preempted on");
  }
  EXPECT_TRUE(preempted);
  // Attempt 2 ran under another allocation, from the checkpoint.
  ASSERT_EQ(job.ranks_size(), 2);
  EXPECT_THAT(job.ranks(0).worker(), ::testing::Not(HasSubstr(first)));
  int64_t first_step_2 = -1;
  for (const auto& p : Metrics(id)) {
    if (p.attempt() == 2 && p.name() == "loss" &&
        (first_step_2 < 0 || p.step() < first_step_2)) {
      first_step_2 = p.step();
    }
  }
  EXPECT_GT(first_step_2, 5) << "attempt 2 did not resume from the drain's checkpoint";
  EXPECT_TRUE(slurm_->WaitForJobState(first, {"CA", "CD", ""}, absl::Minutes(1)).ok());
}

TEST_F(SlurmE2eTest,
       RestartedCoordinatorCancelsTheIdleAllocationAndRevokesItsCredential) {
  // A long idle_timeout: only the restart's check may give the allocation back.
  StartWithPool("10m");
  const int64_t id = Submit(Job("slurm-restart", 10, ""));
  absl::Time until = absl::Now() + absl::Seconds(60);
  while (Get(id).state() != v1::JOB_STATE_RUNNING && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING) << DumpLogs() << slurm_->DaemonLogs();
  const std::string allocation = WorkerOfRank0(id).slurm_job_id();
  ASSERT_FALSE(allocation.empty());
  const std::vector<std::filesystem::path> files = TokenFiles();
  ASSERT_EQ(files.size(), 1u);
  std::string token = testing::ReadFile(files[0].string());
  while (!token.empty() && token.back() == '\n') token.pop_back();
  // The allocation's join credential lets a worker in while it is valid.
  grpc::Status joined = RegisterWithJoinToken(token, "probe-before");
  ASSERT_TRUE(joined.ok()) << joined.error_message();
  const v1::Job done = WaitForEnd(id, absl::Seconds(60));
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.reason() << DumpLogs();

  // The allocation runs idle; the coordinator dies without a word.
  coordinator_->Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).has_value());
  absl::StatusOr<std::string> state = slurm_->JobState(allocation);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, "R") << slurm_->DaemonLogs();

  // The restarted coordinator finds it in its database and gives it back.
  const absl::Time restarted = absl::Now();
  StartCoordinator(port_, pool_flags_);
  absl::Status gone = slurm_->WaitForJobState(allocation, {"CA", ""}, absl::Seconds(30));
  ASSERT_TRUE(gone.ok()) << gone << "\n" << DumpLogs() << slurm_->DaemonLogs();
  std::printf("FIGURE slurm_restart_cancel_s=%.1f\n",
              absl::ToDoubleSeconds(absl::Now() - restarted));
  EXPECT_THAT(coordinator_->Log(),
              HasSubstr(absl::StrCat("cancelled Slurm allocation ", allocation,
                                     ": no job needs it after a coordinator restart")));

  // Its join credential, revoked (in the store and in the coordinator's token
  // cache) before the cancel, no longer lets a worker in, although the
  // allocation's own worker presented it when it registered again after the
  // restart; and its file is gone.
  const grpc::Status refused = RegisterWithJoinToken(token, "probe-after-cancel");
  std::printf("FIGURE slurm_restart_credential_refused_s=%.1f\n",
              absl::ToDoubleSeconds(absl::Now() - restarted));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("revoked"));
  EXPECT_TRUE(TokenFiles().empty());
}

TEST_F(SlurmE2eTest, AllocationTheCoordinatorDiedBeforeStoringEndsAfterTheRestart) {
  StartWithPool("10m");
  const int64_t id = Submit(Job("slurm-unstored", 10, ""));
  const v1::Job done = WaitForEnd(id, absl::Seconds(90));
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.reason() << DumpLogs();
  const std::vector<std::string> running = Allocations();
  ASSERT_EQ(running.size(), 1u) << slurm_->DaemonLogs();
  const std::string allocation = running[0];

  // The coordinator dies, and its database does not hold the allocation: as
  // when it dies between sbatch returning the allocation's id and storing it.
  coordinator_->Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).has_value());
  {
    absl::StatusOr<std::unique_ptr<SqliteStore>> store =
        SqliteStore::Open(dir_.File("tessera.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->DeleteSlurmAllocation(allocation).ok());
  }
  absl::StatusOr<std::string> state = slurm_->JobState(allocation);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(*state, "R");

  // The restarted coordinator does not know the allocation, but revokes the
  // credential no stored allocation holds; the allocation's worker is refused,
  // exits, and the allocation ends long before its 30 minute time limit.
  const absl::Time restarted = absl::Now();
  StartCoordinator(port_, pool_flags_);
  absl::Status ended =
      slurm_->WaitForJobState(allocation, {"CD", "F", "CA", ""}, absl::Seconds(60));
  ASSERT_TRUE(ended.ok()) << ended << "\n" << DumpLogs() << slurm_->DaemonLogs();
  std::printf("FIGURE slurm_unstored_allocation_end_s=%.1f\n",
              absl::ToDoubleSeconds(absl::Now() - restarted));
  EXPECT_THAT(coordinator_->Log(),
              HasSubstr(absl::StrCat("(slurm-cpu-job", id, "): no stored allocation")));
  EXPECT_THAT(
      testing::ReadFile(absl::StrCat(slurm_->dir(), "/alloc-", allocation, ".out")),
      HasSubstr("refused this worker's join credential"));
}

}  // namespace
}  // namespace tessera
