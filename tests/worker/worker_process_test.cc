// The tessera-worker process and its signals, against a scripted coordinator
// (tests/worker/fake_worker_service.h) on 127.0.0.1 with /bin/sh fake
// trainers: SIGTERM drains (--drain-timeout), a second SIGTERM stops at once,
// SIGUSR1 is forwarded to the ranks, --pool / --slurm-job-id reach the
// registration, and a worker killed with SIGKILL leaves no rank running once
// it is restarted.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/trainer_exit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tests/worker/fake_worker_service.h"
#include "worker/cgroup.h"

namespace tessera {
namespace {

using ::tessera::testing::ChildProcess;
using ::tessera::testing::FakeCoordinator;
using ::tessera::testing::FakeWorkerService;
using ::tessera::testing::OnUsr1;
using ::tessera::testing::TempDir;
using ::testing::HasSubstr;
using Key = FakeWorkerService::Key;

int CountLines(const std::string& path) {
  int n = 0;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(path), '\n', absl::SkipEmpty())) {
    (void)line;
    ++n;
  }
  return n;
}

// Alive and not a zombie.
bool Alive(pid_t pid) {
  const std::string stat = testing::ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return !stat.empty() && paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] != 'Z';
}

bool WaitGone(pid_t pid, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (Alive(pid) && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return !Alive(pid);
}

pid_t WaitForPidFile(const std::string& path) {
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until) {
    int pid = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(path)), &pid)) {
      return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << path << " did not appear";
  return 0;
}

bool WaitForLines(const std::string& path, int n) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (CountLines(path) < n && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return CountLines(path) >= n;
}

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("SLURM_JOB_ID"); }

  std::unique_ptr<ChildProcess> StartWorker(const std::vector<std::string>& extra,
                                            bool cgroups = false) {
    std::vector<std::string> argv = {testing::BinDir() + "/tessera-worker",
                                     "--coordinator",
                                     coordinator_.address(),
                                     "--name",
                                     "wp",
                                     "--cpu-slots",
                                     "2",
                                     "--work-dir",
                                     dir_.File("work"),
                                     "--state-dir",
                                     dir_.File("state"),
                                     "--trainer",
                                     dir_.File("trainer.sh"),
                                     "--allow-root-jobs"};
    if (!cgroups) argv.push_back("--no-cgroups");
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto w =
        ChildProcess::Start(argv, dir_.File(absl::StrCat("worker-", ++started_, ".log")));
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return nullptr;
    const size_t n = started_;
    EXPECT_TRUE(service().WaitUntil(
        [n](const FakeWorkerService& s) { return s.registrations_.size() >= n; },
        absl::Seconds(20)))
        << (*w)->Log();
    return *std::move(w);
  }

  // Waits for the worker's exit; its wait status.
  std::optional<int> WaitExit(ChildProcess& w, absl::Duration timeout) {
    return w.Wait(timeout);
  }

  std::string RankFile(int rank, const std::string& ext) const {
    return dir_.File(absl::StrCat("rank-", rank, ".", ext));
  }

  size_t Heartbeats() {
    return service().Read(
        [](const FakeWorkerService& s) { return s.heartbeats_.size(); });
  }
  bool WaitHeartbeats(size_t n) {
    const size_t target = Heartbeats() + n;
    return service().WaitUntil(
        [target](const FakeWorkerService& s) { return s.heartbeats_.size() >= target; },
        absl::Seconds(10));
  }

  FakeWorkerService& service() { return coordinator_.service(); }

  TempDir dir_;
  FakeCoordinator coordinator_;
  size_t started_ = 0;
};

TEST_F(WorkerProcessTest, SigtermDrainsTheRanksAndExitsOnceTheirExitsAreAcknowledged) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kExitPreempted);
  auto w = StartWorker(
      {"--drain-timeout", "30", "--pool", "slurm-cpu", "--slurm-job-id", "81234"});
  ASSERT_NE(w, nullptr);
  const v1::RegisterWorkerRequest reg =
      service().Read([](const FakeWorkerService& s) { return s.registrations_.front(); });
  EXPECT_EQ(reg.pool(), "slurm-cpu");
  EXPECT_EQ(reg.slurm_job_id(), "81234");
  EXPECT_EQ(reg.ranks_size(), 0) << "a fresh worker process runs no rank";
  service().QueueLaunch(testing::Launch(1, 1, 0, 2));
  service().QueueLaunch(testing::Launch(1, 1, 1, 2));
  WaitForPidFile(RankFile(0, "pid"));
  WaitForPidFile(RankFile(1, "pid"));

  const absl::Time sent = absl::Now();
  w->Signal(SIGTERM);
  const std::optional<int> status = WaitExit(*w, absl::Seconds(25));
  ASSERT_TRUE(status.has_value()) << "the worker did not exit; " << w->Log();
  const absl::Duration took = absl::Now() - sent;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << w->Log();
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1);
  EXPECT_EQ(CountLines(RankFile(1, "usr1")), 1);
  service().Read([](const FakeWorkerService& s) {
    for (int rank : {0, 1}) {
      auto it = s.acknowledged_.find(Key{1, 1, rank});
      if (it == s.acknowledged_.end()) {
        ADD_FAILURE() << "the exit of rank " << rank << " was not acknowledged";
        continue;
      }
      EXPECT_EQ(it->second.exit_code(), kTrainerExitPreempted);
    }
    EXPECT_TRUE(s.heartbeats_.back().draining());
    return 0;
  });
  EXPECT_THAT(w->Log(), HasSubstr("draining: asked 2 rank(s) to checkpoint and exit; "
                                  "waiting up to 30s"));
  std::cout << "FIGURE worker_sigterm_drain_ms=" << absl::ToInt64Milliseconds(took)
            << std::endl;
}

TEST_F(WorkerProcessTest, SigusrOneIsForwardedAndSigtermThenRespectsTheDrainTimeout) {
  ::setenv("SLURM_JOB_ID", "555", 1);
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  auto w = StartWorker({"--drain-timeout", "1s", "--kill-grace-ms", "500"});
  ::unsetenv("SLURM_JOB_ID");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(service()
                .Read([](const FakeWorkerService& s) { return s.registrations_.front(); })
                .slurm_job_id(),
            "555")
      << "--slurm-job-id defaults to $SLURM_JOB_ID";
  service().QueueLaunch(testing::Launch(2, 1, 0, 1));
  WaitForPidFile(RankFile(0, "pid"));

  // A preemption notice: forwarded, and the worker keeps running, draining.
  w->Signal(SIGUSR1);
  ASSERT_TRUE(WaitForLines(RankFile(0, "usr1"), 1)) << w->Log();
  ASSERT_TRUE(WaitHeartbeats(3));
  EXPECT_TRUE(w->Running());
  EXPECT_TRUE(service()
                  .Read([](const FakeWorkerService& s) { return s.heartbeats_.back(); })
                  .draining());

  // SIGTERM: the rank that does not leave is stopped after the 1 s drain.
  const absl::Time sent = absl::Now();
  w->Signal(SIGTERM);
  const std::optional<int> status = WaitExit(*w, absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << w->Log();
  const absl::Duration took = absl::Now() - sent;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << w->Log();
  EXPECT_GE(took, absl::Seconds(1)) << "it waited the drain timeout";
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1) << "asked once, not again on SIGTERM";
  EXPECT_EQ(service()
                .Read([](const FakeWorkerService& s) {
                  return s.exits_.at(Key{2, 1, 0});
                })
                .signal(),
            SIGTERM);
  EXPECT_THAT(w->Log(), HasSubstr("drain timeout (1s) passed"));
}

TEST_F(WorkerProcessTest, SecondSigtermStopsAtOnce) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  auto w = StartWorker({"--kill-grace-ms", "2000"});  // default drain timeout: 120 s
  ASSERT_NE(w, nullptr);
  service().QueueLaunch(testing::Launch(3, 1, 0, 1));
  WaitForPidFile(RankFile(0, "pid"));
  w->Signal(SIGTERM);
  ASSERT_TRUE(WaitForLines(RankFile(0, "usr1"), 1)) << w->Log();
  EXPECT_THAT(w->Log(), HasSubstr("waiting up to 120s"));
  w->Signal(SIGTERM);
  const std::optional<int> status = WaitExit(*w, absl::Seconds(15));
  ASSERT_TRUE(status.has_value()) << w->Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST_F(WorkerProcessTest, RanksDieWithASigkilledWorkerAndItsRestartReapsWhatTheyLeft) {
  // The trainer leaves a helper in a session of its own, outside its process
  // group: only the attempt's cgroup still holds it.
  const std::string helper_pid = dir_.File("helper.pid");
  std::ofstream(dir_.File("trainer.sh"))
      << "#!/bin/sh\n"
      << "setsid sleep 300 &\n"
      << "echo $! > " << helper_pid << ".tmp && mv " << helper_pid << ".tmp "
      << helper_pid << "\n"
      << "echo $$ > " << dir_.File("rank-$RANK.pid") << "\n"
      << "while :; do sleep 0.02; done\n";
  ::chmod(dir_.File("trainer.sh").c_str(), 0755);
  // Whether this host lets the worker make cgroups (as the worker checks).
  bool cgroups = false;
  if (absl::StatusOr<std::unique_ptr<CgroupTree>> probe =
          CgroupTree::Create("probe-" + std::to_string(getpid()));
      probe.ok()) {
    cgroups = true;
  }

  auto w = StartWorker({}, cgroups);
  ASSERT_NE(w, nullptr);
  service().QueueLaunch(testing::Launch(4, 1, 0, 1));
  const pid_t rank = WaitForPidFile(RankFile(0, "pid"));
  const pid_t helper = WaitForPidFile(helper_pid);
  ASSERT_GT(rank, 0);
  ASSERT_GT(helper, 0);

  w->Signal(SIGKILL);
  ASSERT_TRUE(WaitExit(*w, absl::Seconds(10)).has_value());
  // PR_SET_PDEATHSIG: the trainer goes with its worker.
  EXPECT_TRUE(WaitGone(rank, absl::Seconds(5))) << "the rank outlived its worker";
  // What the trainer started gets no parent-death signal: it lives
  // on (in the dead worker's cgroup, when there is one).
  EXPECT_TRUE(Alive(helper));

  auto restarted = StartWorker({}, cgroups);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(service()
                .Read([](const FakeWorkerService& s) { return s.registrations_.back(); })
                .ranks_size(),
            0)
      << "the restarted worker runs none of the old ranks";
  if (!cgroups) {
    ::kill(helper, SIGKILL);
    restarted->Signal(SIGTERM);
    GTEST_SKIP() << "no writable cgroup2: what a trainer starts outside its process "
                    "group is not tracked";
  }
  EXPECT_TRUE(WaitGone(helper, absl::Seconds(10)))
      << "the restarted worker left its predecessor's leftovers running; "
      << restarted->Log();
  EXPECT_THAT(restarted->Log(), HasSubstr("left by an earlier worker wp"));
  if (Alive(helper)) ::kill(helper, SIGKILL);
  // Stopped cleanly, it removes its own tree.
  restarted->Signal(SIGTERM);
  EXPECT_TRUE(WaitExit(*restarted, absl::Seconds(15)).has_value());
}

}  // namespace
}  // namespace tessera
