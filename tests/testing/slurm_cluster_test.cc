// The Slurm test harness (slurm_cluster.h) against Debian's real slurmctld,
// slurmd and munged: a batch job with an srun step runs and leaves the queue,
// scancel --signal reaches a batch script and an srun step that trap it, and
// Stop() leaves nothing running. Needs root; skipped otherwise (failed with
// TESSERA_REQUIRE_SLURM=1). Prints FIGURE lines with the start and stop times.
#include "tests/testing/slurm_cluster.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera::testing {
namespace {

using SlurmClusterTest = SlurmTest;

// Waits until `path` contains `text`.
bool WaitForFileText(const std::string& path, const std::string& text,
                     absl::Duration timeout) {
  for (absl::Time until = absl::Now() + timeout; absl::Now() < until;) {
    if (absl::StrContains(ReadFile(path), text)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << body;
  chmod(path.c_str(), 0755);
  return path;
}

TEST_F(SlurmClusterTest, BatchJobWithSrunStepRunsAndLeavesTheQueue) {
  std::cout << "FIGURE slurm_harness_start_s="
            << absl::ToDoubleSeconds(cluster().start_duration()) << "\n";
  const std::string out = cluster().dir() + "/hostname-%j.out";
  absl::StatusOr<std::string> id = cluster().Run(
      {"sbatch", "--parsable", "--output=" + out, "--wrap", "srun hostname"});
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job(absl::StripAsciiWhitespace(*id));
  // squeue lists it while it is queued or runs (or has just completed).
  absl::StatusOr<std::string> state = cluster().JobState(job);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->empty());
  ASSERT_TRUE(cluster().WaitForJobState(job, {"CD"}, absl::Seconds(30)).ok())
      << cluster().DaemonLogs();
  // Plain squeue (active jobs only) no longer lists it.
  absl::StatusOr<std::string> queue = cluster().Run({"squeue", "-h", "-o", "%i"});
  ASSERT_TRUE(queue.ok()) << queue.status();
  EXPECT_FALSE(absl::StrContains(*queue, job)) << *queue;
  // The srun step ran hostname on the node.
  const std::string printed = ReadFile(cluster().dir() + "/hostname-" + job + ".out");
  EXPECT_EQ(absl::StripAsciiWhitespace(printed), cluster().node()) << printed;
}

TEST_F(SlurmClusterTest, ScancelSignalReachesBatchScriptThatTrapsIt) {
  const std::string out = cluster().dir() + "/trap.out";
  const std::string script = WriteScript(cluster().dir() + "/trap.sh",
                                         "#!/bin/bash\n"
                                         "trap 'echo got USR1; exit 0' USR1\n"
                                         "echo started\n"
                                         "while true; do sleep 0.1; done\n");
  absl::StatusOr<std::string> id =
      cluster().Run({"sbatch", "--parsable", "--output=" + out, script});
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job(absl::StripAsciiWhitespace(*id));
  ASSERT_TRUE(WaitForFileText(out, "started", absl::Seconds(30)))
      << cluster().DaemonLogs();
  // --batch: the signal goes to the batch shell (without it, only to steps).
  ASSERT_TRUE(cluster().Run({"scancel", "--batch", "--signal=USR1", job}).ok());
  ASSERT_TRUE(cluster().WaitForJobState(job, {"CD"}, absl::Seconds(30)).ok());
  EXPECT_TRUE(absl::StrContains(ReadFile(out), "got USR1")) << ReadFile(out);
}

TEST_F(SlurmClusterTest, ScancelSignalReachesSrunStepThatTrapsIt) {
  // How the coordinator drains a pool's workers: they run as an srun step.
  const std::string out = cluster().dir() + "/step.out";
  const std::string step = WriteScript(cluster().dir() + "/step.sh",
                                       "#!/bin/bash\n"
                                       "trap 'echo step got USR1; exit 0' USR1\n"
                                       "echo step started\n"
                                       "while true; do sleep 0.1; done\n");
  absl::StatusOr<std::string> id = cluster().Run(
      {"sbatch", "--parsable", "--output=" + out, "--wrap", "exec srun " + step});
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job(absl::StripAsciiWhitespace(*id));
  ASSERT_TRUE(WaitForFileText(out, "step started", absl::Seconds(30)))
      << cluster().DaemonLogs();
  ASSERT_TRUE(cluster().Run({"scancel", "--signal=USR1", job}).ok());
  ASSERT_TRUE(cluster().WaitForJobState(job, {"CD"}, absl::Seconds(30)).ok());
  EXPECT_TRUE(absl::StrContains(ReadFile(out), "step got USR1")) << ReadFile(out);
}

TEST_F(SlurmClusterTest, StopEndsRunningJobsAndDaemons) {
  const std::string pid_file = cluster().dir() + "/task.pid";
  absl::StatusOr<std::string> id =
      cluster().Run({"sbatch", "--parsable", "--output=/dev/null", "--wrap",
                     "srun /bin/bash -c 'echo $$ > " + pid_file + "; exec sleep 300'"});
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForFileText(pid_file, "\n", absl::Seconds(30)))
      << cluster().DaemonLogs();
  int task = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pid_file)), &task));
  ASSERT_EQ(kill(task, 0), 0);
  const std::string conf = cluster().conf_path();

  ASSERT_TRUE(cluster().Stop().ok());
  std::cout << "FIGURE slurm_harness_stop_s="
            << absl::ToDoubleSeconds(cluster().stop_duration()) << "\n";
  // The task, the daemons and the slurmstepds are gone (zombies aside: this
  // is what FindProcesses skips).
  EXPECT_TRUE(FindProcesses({"-f", conf}).empty());
  bool task_gone = false;
  for (absl::Time until = absl::Now() + absl::Seconds(5); absl::Now() < until;) {
    const std::string stat = ReadFile(absl::StrCat("/proc/", task, "/stat"));
    const size_t paren = stat.rfind(')');
    task_gone = stat.empty() || (paren != std::string::npos && stat[paren + 2] == 'Z');
    if (task_gone) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(task_gone) << "the job's task " << task << " outlived Stop()";
  EXPECT_FALSE(std::filesystem::exists(cluster().dir()));
}

}  // namespace
}  // namespace tessera::testing
