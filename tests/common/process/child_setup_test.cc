// SpawnChild (common/process/child_setup.h): the steps between fork and exec
// that the worker's ranks and the coordinator's Slurm commands share: the
// exact environment, stdio, no inherited descriptor, umask, the process
// group, the cgroup join, the account switch, and each failed step reported.
#include "common/process/child_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

// argv or envp as SpawnChild wants them, backed by strings.
class CArray {
 public:
  explicit CArray(std::vector<std::string> items) : items_(std::move(items)) {
    for (std::string& s : items_) ptrs_.push_back(s.data());
    ptrs_.push_back(nullptr);
  }
  char* const* get() const { return ptrs_.data(); }

 private:
  std::vector<std::string> items_;
  std::vector<char*> ptrs_;
};

struct ChildRun {
  SpawnedChild child;
  std::string out;
  int status = 0;
};

// Spawns `argv` with `setup` and its stdout on a pipe; reads it to the end
// and reaps the child.
ChildRun SpawnAndWait(const std::vector<std::string>& argv, ChildSetup setup,
                      const std::vector<std::string>& env = {"PATH=/usr/bin:/bin"}) {
  CArray args(argv);
  CArray envp(env);
  setup.argv = args.get();
  setup.envp = envp.get();
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  setup.stdout_fd = out[1];
  ChildRun run;
  absl::StatusOr<SpawnedChild> child = SpawnChild(setup);
  close(out[1]);
  EXPECT_TRUE(child.ok()) << child.status();
  if (child.ok()) run.child = *child;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) run.out.append(buf, n);
  close(out[0]);
  if (run.child.pid > 0 && !run.child.failed_step) waitpid(run.child.pid, &run.status, 0);
  return run;
}

std::string Trimmed(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s));
}

TEST(ChildSetupTest, GivesExactlyTheEnvironmentItIsTold) {
  setenv("TESSERA_CHILD_SETUP_SECRET", "leak", 1);
  ChildRun run = SpawnAndWait({"/usr/bin/env"}, {}, {"ONLY=this", "PATH=/bin"});
  unsetenv("TESSERA_CHILD_SETUP_SECRET");
  EXPECT_FALSE(run.child.failed_step);
  EXPECT_EQ(run.out, "ONLY=this\nPATH=/bin\n");
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0);
}

TEST(ChildSetupTest, RunsInAProcessGroupOfItsOwnWithUmask077) {
  // Field 5 of /proc/PID/stat is the process group ("sh" has no space).
  ChildRun run = SpawnAndWait(
      {"/bin/sh", "-c", "echo $$ $(cut -d' ' -f5 /proc/$$/stat); umask"}, {});
  ASSERT_FALSE(run.child.failed_step);
  const std::string pid = absl::StrCat(run.child.pid);
  EXPECT_EQ(run.out.substr(0, pid.size() * 2 + 1), absl::StrCat(pid, " ", pid))
      << run.out;
  EXPECT_EQ(Trimmed(run.out.substr(run.out.find('\n') + 1)), "0077");
}

TEST(ChildSetupTest, InheritsNoDescriptorAboveStderrEvenWithoutCloexec) {
  const int leaked = dup2(STDERR_FILENO, 100);  // no O_CLOEXEC
  ASSERT_EQ(leaked, 100);
  ChildRun run =
      SpawnAndWait({"/bin/sh", "-c",
                    "if [ -e /proc/self/fd/100 ]; then echo open; else echo closed; fi"},
                   {});
  close(leaked);
  EXPECT_EQ(Trimmed(run.out), "closed");
}

TEST(ChildSetupTest, MissingProgramReportsTheExecStepAndIsReaped) {
  ChildRun run = SpawnAndWait({"/nonexistent/tessera-program"}, {});
  ASSERT_TRUE(run.child.failed_step);
  EXPECT_EQ(*run.child.failed_step, ChildStep::kExec);
  EXPECT_EQ(run.child.error, ENOENT);
  errno = 0;
  EXPECT_EQ(waitpid(run.child.pid, nullptr, WNOHANG), -1) << "not reaped";
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildSetupTest, FailedCgroupJoinIsReportedBeforeAnythingRuns) {
  testing::TempDir dir;
  const std::string marker = dir.File("ran");
  // A descriptor that cannot be written stands in for cgroup.procs.
  const int procs = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(procs, 0);
  ChildSetup setup;
  setup.cgroup_procs_fd = procs;
  ChildRun run = SpawnAndWait({"/usr/bin/touch", marker}, setup);
  close(procs);
  ASSERT_TRUE(run.child.failed_step);
  EXPECT_EQ(*run.child.failed_step, ChildStep::kJoinCgroup);
  EXPECT_EQ(run.child.error, EBADF);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the program ran";
}

TEST(ChildSetupTest, MissingWorkingDirectoryReportsTheChdirStep) {
  ChildSetup setup;
  setup.working_dir = "/nonexistent/tessera-dir";
  ChildRun run = SpawnAndWait({"/bin/true"}, setup);
  ASSERT_TRUE(run.child.failed_step);
  EXPECT_EQ(*run.child.failed_step, ChildStep::kChdir);
  EXPECT_EQ(run.child.error, ENOENT);
  EXPECT_STREQ(ChildStepName(ChildStep::kChdir), "chdir");
}

TEST(ChildSetupTest, SwitchesToTheAccountWithItsGroupsAndCannotGetRootBack) {
  if (geteuid() != 0) GTEST_SKIP() << "switching accounts needs root";
  absl::StatusOr<UnixAccount> nobody = LookUpUnixAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no account nobody: " << nobody.status();
  ChildSetup setup;
  setup.run_as = &*nobody;
  setup.die_with_parent = true;
  ChildRun run = SpawnAndWait({"/bin/sh", "-c", "id -u; id -g; id -G"}, setup);
  ASSERT_FALSE(run.child.failed_step) << ChildStepName(*run.child.failed_step);
  std::string groups;
  for (size_t i = 0; i < nobody->groups.size(); ++i) {
    absl::StrAppend(&groups, i == 0 ? "" : " ", nobody->groups[i]);
  }
  EXPECT_EQ(run.out.substr(0, run.out.find('\n')), absl::StrCat(nobody->uid));
  EXPECT_NE(run.out.find(absl::StrCat("\n", nobody->gid, "\n")), std::string::npos)
      << run.out;
  EXPECT_EQ(run.out.find("\n0 "), std::string::npos)
      << "still in root's group: " << run.out;
}

TEST(ChildSetupTest, WithoutRootSwitchingAccountsFailsAtSetgroups) {
  if (geteuid() == 0) GTEST_SKIP() << "root may switch; this is the unprivileged case";
  const UnixAccount other{"other", 4242, 4242, {4242}, "/"};
  ChildSetup setup;
  setup.run_as = &other;
  ChildRun run = SpawnAndWait({"/bin/true"}, setup);
  ASSERT_TRUE(run.child.failed_step);
  EXPECT_EQ(*run.child.failed_step, ChildStep::kSetGroups);
  EXPECT_EQ(run.child.error, EPERM);
}

}  // namespace
}  // namespace tessera
