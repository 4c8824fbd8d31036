#include "worker/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "worker/device_probe.h"

namespace tessera {
namespace {

using ::tessera::testing::TempDir;

// Polls until the rank has exited (real processes exit asynchronously).
void WaitExited(Supervisor& sup, const RankKey& key) {
  for (int i = 0; i < 1000; ++i) {
    sup.Poll();
    for (const auto& p : sup.Snapshot()) {
      if (p.key == key && p.exited) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "rank did not exit";
}

// Lines in `path` (0 when it does not exist yet).
int CountLines(const std::string& path) {
  const std::string text = testing::ReadFile(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

RankProcess Find(const Supervisor& sup, const RankKey& key) {
  for (const auto& p : sup.Snapshot()) {
    if (p.key == key) return p;
  }
  ADD_FAILURE() << "rank not tracked";
  return {};
}

class SupervisorTest : public ::testing::Test {
 protected:
  TempDir dir_;
  PosixLauncher launcher_;
  FakeClock clock_;
  Supervisor sup_{&launcher_, &clock_, absl::Seconds(5)};
};

TEST_F(SupervisorTest, RunsArgvWithoutShellInOwnGroupAndCapturesOutput) {
  RankKey key{1, 1, 0};
  ProcessSpec spec;
  spec.argv = {"/bin/echo", "hello; exit 9", "$HOME"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  pid_t pid = Find(sup_, key).pid;
  ASSERT_GT(pid, 0);
  // The group id is checked before the exit is reaped.
  pid_t pgid = getpgid(pid);
  EXPECT_TRUE(pgid == pid || pgid == -1) << "child must lead its own process group";
  WaitExited(sup_, key);
  RankProcess p = Find(sup_, key);
  EXPECT_EQ(p.exit.exit_code, 0);
  EXPECT_EQ(p.exit.signal, 0);
  // No shell: metacharacters and variables reach the program verbatim.
  EXPECT_EQ(testing::ReadFile(spec.log_path), "hello; exit 9 $HOME\n");
}

TEST_F(SupervisorTest, ReportsNonZeroExitCodeAndEnvironment) {
  RankKey key{1, 1, 1};
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo rank=$RANK; exit 7"};
  spec.env = {"RANK=1"};
  spec.log_path = dir_.File("rank1.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  WaitExited(sup_, key);
  EXPECT_EQ(Find(sup_, key).exit.exit_code, 7);
  EXPECT_EQ(testing::ReadFile(spec.log_path), "rank=1\n");
}

TEST_F(SupervisorTest, AnExitedRankCarriesTheExitReasonItPrinted) {
  RankKey key{1, 1, 2};
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "echo 'step 12'; echo 'tessera-train: exit reason: CUDA error: "
               "cudaErrorIllegalAddress on cuda:0' >&2; exit 6"};
  spec.log_path = dir_.File("rank2.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  WaitExited(sup_, key);
  const RankProcess p = Find(sup_, key);
  EXPECT_EQ(p.exit.exit_code, 6);
  EXPECT_EQ(p.exit_detail, "CUDA error: cudaErrorIllegalAddress on cuda:0");
}

TEST_F(SupervisorTest, ChildGetsOnlyItsSpecEnvStdioAndUmask077) {
  // Descriptors the worker holds, inheritable or not, must not reach a rank.
  int leaked[2];
  ASSERT_EQ(::pipe(leaked), 0);  // no O_CLOEXEC
  ::setenv("TESSERA_TEST_WORKER_SECRET", "s3cret", 1);
  RankKey key{1, 1, 2};
  ProcessSpec spec;
  // ls runs as the shell's child and lists the shell's descriptors.
  spec.argv = {"/bin/sh", "-c", "/bin/ls /proc/$$/fd; umask; /usr/bin/env"};
  spec.env = {"ONLY=1"};
  spec.log_path = dir_.File("view.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  WaitExited(sup_, key);
  ::close(leaked[0]);
  ::close(leaked[1]);
  ::unsetenv("TESSERA_TEST_WORKER_SECRET");
  EXPECT_EQ(Find(sup_, key).exit.exit_code, 0);
  std::vector<std::string> lines;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(spec.log_path), '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  ASSERT_GE(lines.size(), 5u) << testing::ReadFile(spec.log_path);
  EXPECT_EQ(std::vector<std::string>(lines.begin(), lines.begin() + 3),
            (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(lines[3], "0077");
  for (size_t i = 4; i < lines.size(); ++i) {
    const std::string name = lines[i].substr(0, lines[i].find('='));
    // The shell may export PWD itself; nothing else but the spec's entry.
    EXPECT_TRUE(name == "ONLY" || name == "PWD") << lines[i];
  }
  EXPECT_THAT(lines, ::testing::Contains("ONLY=1"));
}

TEST_F(SupervisorTest, MissingExecutableIsReportedAsExit127) {
  RankKey key{2, 1, 0};
  ProcessSpec spec;
  spec.argv = {dir_.File("no-such-trainer")};
  spec.log_path = dir_.File("rank.log");
  absl::Status s = sup_.Start(key, spec);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("cannot execute"));
  RankProcess p = Find(sup_, key);
  EXPECT_TRUE(p.exited);
  EXPECT_EQ(p.exit.exit_code, 127);
}

TEST_F(SupervisorTest, StopEscalatesToSigkillAfterGraceWhenSigtermIsIgnored) {
  RankKey key{3, 1, 0};
  ProcessSpec spec;
  const std::string ready = dir_.File("ready");
  const std::string got_term = dir_.File("got-term");
  const std::string beats = dir_.File("beats");
  // The rank notes each SIGTERM in a file and carries on, adding a line to
  // `beats` every 50 ms.
  spec.argv = {"/bin/sh", "-c",
               "trap 'touch " + got_term + "' TERM; touch " + ready +
                   "; while :; do echo . >> " + beats + "; sleep 0.05; done"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  ASSERT_TRUE(
      testing::WaitFor([&] { return std::filesystem::exists(ready); }, absl::Seconds(10)))
      << "the rank did not start";

  sup_.Stop(key);
  // The events the check is about: the SIGTERM arrived and was shrugged off,
  // the supervisor looked again (a supervisor that ignored the grace would
  // kill here), and the rank kept working after that.
  ASSERT_TRUE(testing::WaitFor([&] { return std::filesystem::exists(got_term); },
                               absl::Seconds(10)))
      << "the rank never received SIGTERM";
  sup_.Poll();
  const int after_term = CountLines(beats);
  ASSERT_TRUE(testing::WaitFor([&] { return CountLines(beats) >= after_term + 3; },
                               absl::Seconds(10)))
      << "the rank stopped working inside the grace period";
  sup_.Poll();
  EXPECT_FALSE(Find(sup_, key).exited)
      << "SIGTERM is ignored; only the grace expiry kills";

  clock_.Advance(absl::Seconds(6));
  WaitExited(sup_, key);
  EXPECT_EQ(Find(sup_, key).exit.signal, SIGKILL);
}

// Waits until `path` exists.
bool WaitForFile(const std::string& path) {
  for (int i = 0; i < 1000 && !std::filesystem::exists(path); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::filesystem::exists(path);
}

// Waits until `pid` is stopped (state 'T').
bool WaitStopped(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    if (ProcStatState(testing::ReadFile("/proc/" + std::to_string(pid) + "/stat")) == 'T')
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(ProcStatStateTest, ReadsTheStateAfterTheLastParenthesis) {
  EXPECT_EQ(ProcStatState("123 (tessera-train) T 1 123 123 0"), 'T');
  EXPECT_EQ(ProcStatState("123 (a) b) (c) S 1 123"), 'S');
  EXPECT_EQ(ProcStatState(""), '\0');
  EXPECT_EQ(ProcStatState("123 (cut"), '\0');
}

TEST_F(SupervisorTest, StopKillsAStoppedRankAtOnceInsteadOfWaitingForTheGrace) {
  RankKey key{3, 1, 1};
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "60"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  const pid_t pid = Find(sup_, key).pid;
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitStopped(pid));
  EXPECT_TRUE(launcher_.IsStopped(pid));

  sup_.Stop(key);
  // The fake clock never reaches the grace: only an immediate SIGKILL ends it.
  WaitExited(sup_, key);
  EXPECT_EQ(Find(sup_, key).exit.signal, SIGKILL);
}

TEST_F(SupervisorTest, RankStoppedAfterItsSigtermIsKilledAtTheNextPoll) {
  RankKey key{3, 1, 2};
  ProcessSpec spec;
  const std::string ready = dir_.File("ready");
  spec.argv = {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; exec sleep 60"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  ASSERT_TRUE(WaitForFile(ready));
  const pid_t pid = Find(sup_, key).pid;
  sup_.Stop(key);  // SIGTERM, ignored
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitStopped(pid));
  WaitExited(sup_, key);  // Poll sees it stopped; the clock stands still
  EXPECT_EQ(Find(sup_, key).exit.signal, SIGKILL);
}

TEST_F(SupervisorTest, PreemptSendsSigusr1ToTheTrainerAloneAndOnlyOnce) {
  RankKey key{5, 1, 0};
  ProcessSpec spec;
  const std::string trainer = dir_.File("trainer.signals");
  const std::string child = dir_.File("child.signals");
  const std::string ready = dir_.File("ready");
  // A child in the trainer's process group notes the signals it gets, too.
  // USR2 to the whole group afterwards shows when both have handled what
  // came before it.
  spec.argv = {"/bin/sh", "-c",
               "(trap 'echo usr1 >> " + child + "' USR1; trap 'echo usr2 >> " + child +
                   "' USR2; touch " + ready + ".child; while :; do sleep 0.02; done) & " +
                   "trap 'echo usr1 >> " + trainer + "' USR1; trap 'echo usr2 >> " +
                   trainer + "' USR2; touch " + ready + "; while :; do sleep 0.02; done"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  ASSERT_TRUE(WaitForFile(ready));
  ASSERT_TRUE(WaitForFile(ready + ".child"));
  const pid_t pid = Find(sup_, key).pid;

  EXPECT_TRUE(sup_.Preempt(key));
  EXPECT_FALSE(sup_.Preempt(key)) << "asked once already";
  EXPECT_TRUE(Find(sup_, key).preempted);
  ::kill(-pid, SIGUSR2);
  for (int i = 0; i < 1000; ++i) {
    if (testing::ReadFile(trainer).find("usr2") != std::string::npos &&
        testing::ReadFile(child).find("usr2") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(testing::ReadFile(trainer), "usr1\nusr2\n");
  EXPECT_EQ(testing::ReadFile(child), "usr2\n") << "SIGUSR1 went to the group";
  sup_.StopAll();
  EXPECT_FALSE(sup_.Preempt(key)) << "an exited rank is not asked";
}

TEST_F(SupervisorTest, StopAllTerminatesEveryRankAndForgetDropsExited) {
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "60"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start({4, 1, 0}, spec).ok());
  ASSERT_TRUE(sup_.Start({4, 1, 1}, spec).ok());
  EXPECT_EQ(sup_.running(), 2);
  sup_.StopAll();
  EXPECT_EQ(sup_.running(), 0);
  EXPECT_EQ(Find(sup_, {4, 1, 0}).exit.signal, SIGTERM);
  sup_.Forget({4, 1, 0});
  EXPECT_FALSE(sup_.Has({4, 1, 0}));
  EXPECT_TRUE(sup_.Has({4, 1, 1}));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(CgroupParseTest, FindsCgroup2MountAndOwnPath) {
  const std::string mountinfo =
      "24 30 0:22 / /proc rw,nosuid - proc proc rw\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(FindCgroup2Mount(mountinfo), "/sys/fs/cgroup/unified");
  EXPECT_EQ(FindCgroup2Mount("24 30 0:22 / /proc rw - proc proc rw\n"), std::nullopt);
  EXPECT_EQ(OwnCgroupPath("1:cpu:/\n0::/system.slice/tessera-worker.service\n"),
            "/system.slice/tessera-worker.service");
  EXPECT_EQ(OwnCgroupPath("0::/\n"), "/");
}

bool Alive(pid_t pid) {
  std::string stat = testing::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

TEST(SupervisorCgroupTest, RankProcessesJoinTheAttemptGroupAndStoppingEmptiesIt) {
  absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
      CgroupTree::Create("test-" + std::to_string(getpid()));
  if (!tree.ok()) GTEST_SKIP() << "no writable cgroup2 here: " << tree.status();
  testing::TempDir dir;
  PosixLauncher launcher;
  RealClock clock;
  Supervisor sup(&launcher, &clock, absl::Seconds(2), tree->get());

  const std::string escaped = dir.File("escaped.pid");
  const std::string ready = dir.File("ready");
  ProcessSpec spec;
  // The helper leaves the rank's process group and session; only the cgroup
  // still holds it.
  spec.argv = {"/bin/sh", "-c",
               "setsid sh -c 'echo $$ > " + escaped +
                   "; exec sleep 60' & "
                   "while [ ! -s " +
                   escaped + " ]; do sleep 0.01; done; touch " + ready +
                   "; exec sleep 60"};
  spec.log_path = dir.File("rank.log");
  const RankKey key{9, 1, 0};
  ASSERT_TRUE(sup.Start(key, spec).ok());
  for (int i = 0; i < 1000 && !std::filesystem::exists(ready); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(ready));
  const pid_t rank_pid = sup.Snapshot()[0].pid;
  pid_t helper = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(escaped)), &helper));

  const std::string group = (*tree)->root() + "/job-9-attempt-1";
  // The shell's short-lived children (the `touch` that made `ready`) may not
  // have been reaped yet: wait until only the two long-lived processes remain.
  std::vector<pid_t> pids = (*tree)->Pids(group);
  for (int i = 0; i < 500 && pids.size() > 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pids = (*tree)->Pids(group);
  }
  EXPECT_THAT(pids, ::testing::UnorderedElementsAre(rank_pid, helper));
  EXPECT_THAT(testing::ReadFile("/proc/" + std::to_string(rank_pid) + "/cgroup"),
              ::testing::HasSubstr("/job-9-attempt-1"));
  EXPECT_NE(getpgid(helper), rank_pid) << "the helper must have left the process group";

  sup.Stop(key);
  WaitExited(sup, key);
  // The group is emptied and removed once the rank is gone.
  for (int i = 0; i < 500 && std::filesystem::exists(group); ++i) {
    sup.Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(std::filesystem::exists(group));
  for (int i = 0; i < 500 && Alive(helper); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(helper)) << "the escaped helper survived the job";
}

// A pid that no process has: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(CgroupLeftoversTest, ReapsTreesOfDeadWorkersOfTheSameNameAndNothingElse) {
  const std::optional<std::string> mount =
      FindCgroup2Mount(testing::ReadFile("/proc/self/mountinfo"));
  if (!mount) GTEST_SKIP() << "no cgroup2 here";
  std::string own = OwnCgroupPath(testing::ReadFile("/proc/self/cgroup"));
  if (own == "/") own.clear();
  const std::string parent = *mount + own;
  const std::string name = "reap-" + std::to_string(getpid());
  const std::string dead = parent + "/tessera-" + name + "-" + std::to_string(DeadPid());
  const std::string live = parent + "/tessera-" + name + "-" + std::to_string(getpid());
  const std::string other =
      parent + "/tessera-" + name + "-2-" + std::to_string(DeadPid());  // worker NAME-2
  if (::mkdir(dead.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create cgroups here";
  ASSERT_EQ(::mkdir((dead + "/job-1-attempt-1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(live.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(other.c_str(), 0755), 0);
  // What a trainer of the dead worker left behind.
  testing::TempDir dir;
  auto left = testing::ChildProcess::Start({"/bin/sleep", "60"}, dir.File("sleep.log"));
  ASSERT_TRUE(left.ok());
  std::ofstream(dead + "/job-1-attempt-1/cgroup.procs") << (*left)->pid();
  ASSERT_THAT(testing::ReadFile(dead + "/job-1-attempt-1/cgroup.procs"),
              ::testing::HasSubstr(std::to_string((*left)->pid())));

  const CgroupTree::Leftovers reaped = CgroupTree::ReapLeftovers(parent, name);
  EXPECT_EQ(reaped.trees, 1);
  EXPECT_EQ(reaped.processes, 1);
  const std::optional<int> status = (*left)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "the leftover process still runs";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live)) << "a live worker's tree was touched";
  EXPECT_TRUE(std::filesystem::exists(other)) << "another worker's tree was touched";
  ::rmdir(live.c_str());
  ::rmdir(other.c_str());
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(DeviceProbeTest, CountsNvidiaGpuDirectories) {
  testing::TempDir root;
  EXPECT_EQ(CountNvidiaGpus(root.path()), 0) << "no driver: no GPUs";
  for (const char* bus : {"0000:17:00.0", "0000:65:00.0"}) {
    std::filesystem::create_directories(root.path() + "/proc/driver/nvidia/gpus/" + bus);
  }
  EXPECT_EQ(CountNvidiaGpus(root.path()), 2);
}

}  // namespace
}  // namespace tessera
