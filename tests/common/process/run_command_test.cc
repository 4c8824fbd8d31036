// RunCommand (common/process/run_command.h): argv without a shell, the
// exact environment, stdin, separate stdout/stderr, output limits, the
// timeout that kills the process group, exec and working-directory errors,
// run-as.
#include "common/process/run_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

CommandSpec Spec(std::vector<std::string> argv) {
  CommandSpec spec;
  spec.argv = std::move(argv);
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.timeout = absl::Seconds(10);
  return spec;
}

TEST(RunCommandTest, PassesArgumentsLiterallyWithoutAShell) {
  absl::StatusOr<CommandResult> r = RunCommand(Spec({"/bin/echo", "$(id)", "a;b", "*"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->succeeded());
  EXPECT_EQ(r->out, "$(id) a;b *\n");
}

TEST(RunCommandTest, GivesExactlyTheEnvironmentItIsTold) {
  CommandSpec spec = Spec({"/usr/bin/env"});
  spec.env = {"ONLY=this", "PATH=/bin"};
  setenv("TESSERA_RUNNER_TEST_SECRET", "leak", 1);
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  unsetenv("TESSERA_RUNNER_TEST_SECRET");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "ONLY=this\nPATH=/bin\n");
}

TEST(RunCommandTest, FeedsStdinAndSeparatesStdoutFromStderr) {
  CommandSpec spec = Spec({"/bin/sh", "-c", "cat; echo oops >&2; exit 3"});
  spec.stdin_data = std::string(200000, 'x');  // more than a pipe buffer
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out.size(), 200000u);
  EXPECT_EQ(r->err, "oops\n");
  EXPECT_EQ(DescribeExit(*r), "exit code 3");
}

TEST(RunCommandTest, KeepsAtMostTheOutputLimit) {
  CommandSpec spec = Spec({"/usr/bin/head", "-c", "100000", "/dev/zero"});
  spec.max_output_bytes = 1000;
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->succeeded());
  EXPECT_EQ(r->out.size(), 1000u);
}

TEST(RunCommandTest, KillsTheProcessGroupAtTheTimeout) {
  testing::TempDir dir;
  const std::string pid_file = dir.File("child.pid");
  // The program starts a grandchild that holds stdout open, then hangs.
  CommandSpec spec =
      Spec({"/bin/sh", "-c",
            "sleep 300 & echo $! > " + pid_file + "; echo started >&2; wait"});
  spec.timeout = absl::Milliseconds(500);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  const absl::Duration took = absl::Now() - t0;
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "started")) << r.status();
  EXPECT_LT(took, absl::Seconds(5));
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(pid_file)),
                               &grandchild));
  bool gone = false;
  for (absl::Time until = absl::Now() + absl::Seconds(5); !gone && absl::Now() < until;) {
    const std::string stat =
        testing::ReadFile(absl::StrCat("/proc/", grandchild, "/stat"));
    const size_t paren = stat.rfind(')');
    gone = stat.empty() || (paren != std::string::npos && stat[paren + 2] == 'Z');
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the grandchild " << grandchild << " survived the timeout";
}

TEST(RunCommandTest, MissingProgramIsNotFound) {
  absl::StatusOr<CommandResult> r = RunCommand(Spec({"/nonexistent/sbatch"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "/nonexistent/sbatch"))
      << r.status();
}

TEST(RunCommandTest, RefusesARelativeProgram) {
  absl::StatusOr<CommandResult> r = RunCommand(Spec({"sbatch"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST(RunCommandTest, ReportsTheKillingSignal) {
  absl::StatusOr<CommandResult> r = RunCommand(Spec({"/bin/sh", "-c", "kill -9 $$"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_TRUE(absl::StrContains(DescribeExit(*r), "signal 9")) << DescribeExit(*r);
}

TEST(RunCommandTest, RunsAsAnotherAccountWithItsGroups) {
  if (geteuid() != 0) GTEST_SKIP() << "switching accounts needs root";
  absl::StatusOr<UnixAccount> nobody = LookUpUnixAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no account nobody: " << nobody.status();
  CommandSpec spec = Spec({"/usr/bin/id", "-u"});
  spec.run_as = *nobody;
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(absl::StripAsciiWhitespace(r->out), absl::StrCat(nobody->uid));
  spec.argv = {"/usr/bin/id", "-G"};
  r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  for (absl::string_view gid :
       absl::StrSplit(r->out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    EXPECT_NE(gid, "0") << "still in root's group: " << r->out;
  }
}

TEST(RunCommandTest, MissingWorkingDirectoryNamesTheChdirStep) {
  CommandSpec spec = Spec({"/bin/true"});
  spec.working_dir = "/nonexistent/tessera-dir";
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "chdir")) << r.status();
}

TEST(RunCommandTest, AsAnotherAccountTheWorkingDirectoryIsEnteredAsThatAccount) {
  if (geteuid() != 0) GTEST_SKIP() << "switching accounts needs root";
  absl::StatusOr<UnixAccount> nobody = LookUpUnixAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no account nobody: " << nobody.status();
  testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);  // root's alone
  CommandSpec spec = Spec({"/bin/true"});
  spec.working_dir = dir.path();
  spec.run_as = *nobody;
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "chdir (as nobody)")) << r.status();
}

}  // namespace
}  // namespace tessera
