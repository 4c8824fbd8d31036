// Hung, slow and vanished ranks, end to end with real processes on 127.0.0.1:
// a SIGSTOPped rank and a rank stuck in data wait are named and their attempt
// ended within seconds; a slowed rank is flagged, not killed; a worker killed
// and restarted under its name leaves no ghost slots; a drain (tessctl's call,
// or SIGTERM to the worker) moves a job elsewhere from a checkpoint taken at
// the drain. The coordinator runs with short thresholds (3 s silent, 10 s
// stall, 5 s straggler window); scripts/robustness_campaign.sh measures the
// defaults. Prints FIGURE lines for docs/performance.md's robustness table.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "tests/e2e/cluster_fixture.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// vit-micro on synthetic data for `steps` steps; `extra` adds trainer lines.
std::string Job(const std::string& name, int world, int64_t steps, int max_restarts,
                const std::string& extra) {
  return absl::StrCat("name: ", name, "\nworld_size: ", world,
                      "\nmax_restarts: ", max_restarts, R"(
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

double SecondsBetween(absl::Time from, int64_t to_unix_ms) {
  return absl::ToDoubleSeconds(absl::FromUnixMillis(to_unix_ms) - from);
}

class RobustnessE2eTest : public ClusterTest {
 protected:
  // With TESSERA_ROBUSTNESS_DEFAULTS=1 (scripts/robustness_campaign.sh) the
  // coordinator keeps its default thresholds.
  void StartCluster(int workers, std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {
        "--rank-silent-after", "3",   "--stall-after-min",  "10",
        "--progress-interval", "0.5", "--straggler-window", "5"};
    if (const char* d = std::getenv("TESSERA_ROBUSTNESS_DEFAULTS");
        d != nullptr && std::string(d) == "1") {
      flags.clear();
    }
    flags.insert(flags.end(), extra.begin(), extra.end());
    StartCoordinator(0, flags);
    for (int i = 1; i <= workers; ++i) StartWorker(absl::StrCat("w", i), port_);
    WaitForWorkers(workers);
  }

  // The first event whose reason contains `text`, or nullopt within `timeout`.
  std::optional<v1::JobEvent> WaitForEvent(int64_t id, const std::string& text,
                                           absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      const v1::Job job = Get(id);
      for (const v1::JobEvent& e : job.events()) {
        if (absl::StrContains(e.reason(), text)) return e;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return std::nullopt;
  }

  // Waits until a checkpoint has been published in `dir`.
  bool WaitForCheckpoint(const std::string& dir, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      if (std::filesystem::exists(dir + "/latest")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // Lowest and highest "loss" step each attempt reported.
  std::pair<int64_t, int64_t> StepsOf(int64_t id, int32_t attempt) {
    int64_t lo = -1, hi = -1;
    for (const auto& p : Metrics(id)) {
      if (p.attempt() != attempt || p.name() != "loss") continue;
      if (lo < 0 || p.step() < lo) lo = p.step();
      hi = std::max(hi, p.step());
    }
    return {lo, hi};
  }

  std::unique_ptr<v1::JobService::Stub> AdminStub() {
    const std::string name = absl::StrCat("tsr-admin", getpid());
    const std::string log = dir_.File("token-admin.out");
    auto p = ChildProcess::Start(
        {testing::BinDir() + "/tessera-coordinator", "--db", dir_.File("tessera.db"),
         "token", "create", "--name", name, "--admin"},
        log);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return nullptr;
    (*p)->Wait(absl::Seconds(30));
    std::string token = testing::ReadFile(log);
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
      token.pop_back();
    }
    return v1::JobService::NewStub(
        testing::ChannelWithToken(absl::StrCat("127.0.0.1:", port_), token));
  }

  bool NoTrainersWithin(int64_t id, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      if (TrainerPids(id).empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return TrainerPids(id).empty();
  }
};

TEST_F(RobustnessE2eTest, StoppedRankIsNamedAndTheJobResumesFromItsCheckpoint) {
  StartCluster(2);
  const std::string ckpt = dir_.File("ckpt-stop");
  const int64_t id =
      Submit(Job("sigstop", 2, 400, 1,
                 absl::StrCat("  checkpoint_every: 20\n  checkpoint_dir: ", ckpt, "\n")));
  WaitForTraining(id, 2, absl::Minutes(2));
  ASSERT_TRUE(WaitForCheckpoint(ckpt, absl::Minutes(1))) << DumpLogs();
  v1::Job job = Get(id);
  ASSERT_EQ(job.ranks_size(), 2);
  const std::string victim_worker = job.ranks(1).worker();
  ASSERT_GT(job.ranks(1).pid(), 0) << job.DebugString();
  const absl::Time stopped_at = absl::Now();
  ASSERT_EQ(kill(job.ranks(1).pid(), SIGSTOP), 0);

  std::optional<v1::JobEvent> ended = WaitForEvent(id, "unresponsive", absl::Minutes(1));
  ASSERT_TRUE(ended.has_value()) << DumpLogs();
  EXPECT_EQ(ended->to_state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(ended->reason(),
              HasSubstr(absl::StrCat("rank 1 on ", victim_worker, " unresponsive")));
  std::printf("FIGURE hang_to_restart_s=%.1f\n",
              SecondsBetween(stopped_at, ended->unix_ms()));

  job = WaitForEnd(id, absl::Minutes(3));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_GT(StepsOf(id, 2).first, 5) << "attempt 2 did not resume from the checkpoint";
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10))) << "the stopped rank survives";
}

TEST_F(RobustnessE2eTest, RankStuckInDataWaitIsNamedWithItsPhaseWhilePeersWait) {
  StartCluster(2);
  const int64_t id =
      Submit(Job("stuck", 2, 400, 0, "  fault: hang:rank=1,step=30,phase=data\n"));
  WaitForTraining(id, 2, absl::Minutes(2));
  // When rank 1 got stuck: its report shows step 30 in data wait.
  absl::Time stuck_at = absl::InfiniteFuture();
  std::string worker;
  for (int i = 0; i < 600 && stuck_at == absl::InfiniteFuture(); ++i) {
    v1::Job job = Get(id);
    if (job.ranks_size() == 2 && job.ranks(1).has_progress() &&
        job.ranks(1).progress().phase() == "data" &&
        job.ranks(1).progress().step() >= 30) {
      stuck_at =
          absl::Now() - absl::Milliseconds(job.ranks(1).progress().phase_elapsed_ms() +
                                           job.ranks(1).progress_age_ms());
      worker = job.ranks(1).worker();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(stuck_at, absl::InfiniteFuture()) << DumpLogs();

  v1::Job job = WaitForEnd(id, absl::Minutes(2));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr(absl::StrCat("rank 1 on ", worker,
                                                   " stalled at step 30 in data")));
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 waiting on allreduce"));
  int64_t ended_ms = 0;
  for (const v1::JobEvent& e : job.events()) {
    if (e.to_state() == v1::JOB_STATE_FAILED) ended_ms = e.unix_ms();
  }
  std::printf("FIGURE stall_to_kill_s=%.1f\n", SecondsBetween(stuck_at, ended_ms));
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10)));
}

TEST_F(RobustnessE2eTest, SlowRankIsFlaggedAsAStragglerAndTheJobSucceeds) {
  StartCluster(2);
  const absl::Time submitted = absl::Now();
  const int64_t id =
      Submit(Job("slow", 2, 250, 0, "  fault: slow:rank=1,phase=forward,ms=60\n"));
  std::optional<v1::JobEvent> flagged = WaitForEvent(id, "straggler:", absl::Minutes(2));
  ASSERT_TRUE(flagged.has_value()) << DumpLogs();
  EXPECT_THAT(flagged->reason(), HasSubstr("rank 1 on"));
  EXPECT_THAT(flagged->reason(), HasSubstr("forward"));
  v1::Job running = Get(id);
  if (running.state() == v1::JOB_STATE_RUNNING) {
    EXPECT_THAT(running.stragglers(), ::testing::Contains(HasSubstr("rank 1 on")));
  }
  const v1::Job job = WaitForEnd(id, absl::Minutes(3));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_EQ(job.attempt(), 1) << "a straggler must not be killed";
  int events = 0;
  for (const v1::JobEvent& e : job.events()) {
    events += absl::StrContains(e.reason(), "straggler: rank 1") ? 1 : 0;
  }
  EXPECT_EQ(events, 1) << "one event per episode";
  // Time from the job's training start to the flag.
  int64_t running_ms = 0;
  for (const v1::JobEvent& e : job.events()) {
    if (e.to_state() == v1::JOB_STATE_RUNNING && running_ms == 0)
      running_ms = e.unix_ms();
  }
  std::printf("FIGURE straggler_flagged_after_s=%.1f\n",
              absl::ToDoubleSeconds(absl::FromUnixMillis(flagged->unix_ms()) -
                                    absl::FromUnixMillis(running_ms)));
  (void)submitted;
}

TEST_F(RobustnessE2eTest, WorkerKilledAndRestartedUnderItsNameLeavesNoGhostSlots) {
  StartCluster(1);
  const int64_t id = Submit(Job("ghost", 1, 1000000, 0, ""));
  WaitForTraining(id, 1, absl::Minutes(2));
  workers_[0]->Signal(SIGKILL);
  workers_[0]->Wait(absl::Seconds(10));
  workers_.clear();
  // systemd's Restart=on-failure: back under the same name within 2 s.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const absl::Time restarted = absl::Now();
  StartWorker("w1", port_);
  v1::Job job = WaitForEnd(id, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("registered again (restarted) without it"));
  const double lost_after = SecondsBetween(restarted, job.updated_unix_ms());
  EXPECT_LT(lost_after, 5);
  std::printf("FIGURE lost_after_reregister_s=%.1f\n", lost_after);

  int used = -1;
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    for (const auto& w : resp.workers()) {
      if (w.name() == "w1" && w.alive()) used = w.slots_used();
    }
    if (used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(used, 0);
  std::printf("FIGURE ghost_slots_after_worker_restart=%d\n", used);
  const int64_t next = Submit(Job("after-ghost", 1, 20, 0, ""));
  EXPECT_EQ(WaitForEnd(next, absl::Minutes(2)).state(), v1::JOB_STATE_SUCCEEDED);
}

// Drains the worker that runs the 1-rank job (through `drain`), then checks
// that the job moved, resumed from the drain's checkpoint and succeeded.
class DrainE2eTest : public RobustnessE2eTest {
 protected:
  void RunDrain(const std::function<void(const std::string& worker)>& drain) {
    StartCluster(2);
    const std::string ckpt = dir_.File("ckpt-drain");
    // Checkpoints only at the end: what attempt 2 resumes from is the drain's.
    const int64_t id = Submit(
        Job("drain", 1, 300, 0,
            absl::StrCat("  checkpoint_every: 100000\n  checkpoint_dir: ", ckpt, "\n")));
    WaitForTraining(id, 1, absl::Minutes(2));
    ASSERT_TRUE(WaitForStep(id, 40, absl::Minutes(2), /*attempt=*/1));
    const std::string from = Get(id).ranks(0).worker();
    drain(from);
    std::optional<v1::JobEvent> moved =
        WaitForEvent(id, absl::StrCat("preempted on ", from), absl::Minutes(2));
    ASSERT_TRUE(moved.has_value()) << DumpLogs();
    EXPECT_THAT(moved->reason(), HasSubstr("not counted as a restart"));
    const v1::Job job = WaitForEnd(id, absl::Minutes(3));
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
    EXPECT_EQ(job.attempt(), 2);
    EXPECT_EQ(job.preemptions(), 1);
    ASSERT_EQ(job.ranks_size(), 1);
    EXPECT_NE(job.ranks(0).worker(), from);
    const auto [first, last] = StepsOf(id, 1);
    const int64_t resumed = StepsOf(id, 2).first;
    // Resumed where attempt 1 stopped, within one metrics interval.
    EXPECT_GE(resumed, last - 5 + 1) << "attempt 2 lost work: attempt 1 reached " << last;
    std::printf("FIGURE drain_lost_steps=%lld\n",
                static_cast<long long>(std::max<int64_t>(0, last - (resumed - 5))));
    (void)first;
  }
};

TEST_F(DrainE2eTest, TessctlDrainMovesTheJobAndResumesFromTheDrainCheckpoint) {
  RunDrain([this](const std::string& worker) {
    auto admin = AdminStub();
    ASSERT_NE(admin, nullptr);
    grpc::ClientContext ctx;
    v1::DrainWorkerRequest req;
    req.set_name(worker);
    v1::DrainWorkerResponse resp;
    grpc::Status s = admin->DrainWorker(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(resp.worker().draining());
    // An ordinary user may not drain.
    grpc::ClientContext user_ctx;
    EXPECT_EQ(jobs_->DrainWorker(&user_ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  });
}

TEST_F(DrainE2eTest, SigtermToTheWorkerDrainsItBeforeItExits) {
  RunDrain([this](const std::string& worker) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i]->log_path().find("/" + worker + ".log") == std::string::npos) {
        continue;
      }
      workers_[i]->Signal(SIGTERM);
      std::optional<int> status = workers_[i]->Wait(absl::Minutes(2));
      ASSERT_TRUE(status.has_value()) << "the worker did not exit after draining";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << workers_[i]->Log();
      workers_.erase(workers_.begin() + static_cast<long>(i));
      return;
    }
    FAIL() << "no worker process named " << worker;
  });
}

}  // namespace
}  // namespace tessera
