#include "worker/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

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
  // Ignored signals stay ignored across exec, so sleep ignores SIGTERM too.
  spec.argv = {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; exec sleep 60"};
  spec.log_path = dir_.File("rank.log");
  ASSERT_TRUE(sup_.Start(key, spec).ok());
  for (int i = 0; i < 1000 && !std::filesystem::exists(ready); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(ready));

  sup_.Stop(key);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sup_.Poll();
  EXPECT_FALSE(Find(sup_, key).exited) << "SIGTERM is ignored; only the grace expiry kills";

  clock_.Advance(absl::Seconds(6));
  WaitExited(sup_, key);
  EXPECT_EQ(Find(sup_, key).exit.signal, SIGKILL);
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
