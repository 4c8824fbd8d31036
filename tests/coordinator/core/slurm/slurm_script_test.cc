// The batch script of a pool allocation (coordinator/core/slurm/slurm_script.h):
// its #SBATCH lines, and the worker argv it really produces, run through
// bash with a stand-in srun and worker.
#include "coordinator/core/slurm/slurm_script.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process/run_command.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

SlurmPoolConfig CpuPool() {
  SlurmPoolConfig pool;
  pool.name = "cpu";
  pool.partition = "debug";
  pool.max_nodes = 2;
  pool.cpus_per_node = 2;
  pool.time_limit = absl::Minutes(90);
  pool.worker_path = "/opt/tessera/bin/tessera-worker";
  return pool;
}

SlurmAllocationRequest Request() {
  return {.job_id = 12,
          .nodes = 2,
          .coordinator_address = "10.0.0.1:50051",
          .join_token_file = "/shared/tessera/join/alloc-12.token"};
}

TEST(SlurmScriptTest, RendersTheSbatchLinesAndOneWorkerPerNode) {
  absl::StatusOr<std::string> script = RenderSbatchScript(CpuPool(), Request());
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_EQ(
      *script,
      "#!/bin/bash\n"
      "#SBATCH --job-name=tessera-cpu-job12\n"
      "#SBATCH --nodes=2\n"
      "#SBATCH --ntasks-per-node=1\n"
      "#SBATCH --cpus-per-task=2\n"
      "#SBATCH --time=0-01:30:00\n"
      "#SBATCH --no-requeue\n"
      "#SBATCH --signal=USR1@120\n"
      "#SBATCH --output=/dev/null\n"
      "#SBATCH --partition=debug\n"
      "# Written by tessera-coordinator for job 12 in Slurm pool cpu.\n"
      "# One tessera-worker per node; they register with the coordinator under\n"
      "# the pool's label and drain on SIGUSR1. The join credential is read\n"
      "# from --join-token-file: it is in neither this script nor any argv.\n"
      "exec srun --ntasks-per-node=1 \\\n"
      "  --cpus-per-task=2 \\\n"
      "  --kill-on-bad-exit=0 \\\n"
      "  /bin/bash -c 'exec \"$@\" --name \"$(hostname -s)-slurm-${SLURM_JOB_ID}\"' \\\n"
      "  tessera-worker \\\n"
      "  '/opt/tessera/bin/tessera-worker' \\\n"
      "  --coordinator '10.0.0.1:50051' \\\n"
      "  --pool 'cpu' \\\n"
      "  --slurm-job-id \"${SLURM_JOB_ID}\" \\\n"
      "  --join-token-file '/shared/tessera/join/alloc-12.token' \\\n"
      "  --cpu-slots 2 --gpus none \\\n"
      "  --work-dir '/tmp'\"/tessera-slurm-${SLURM_JOB_ID}-work\" \\\n"
      "  --state-dir '/tmp'\"/tessera-slurm-${SLURM_JOB_ID}-state\"\n");
}

TEST(SlurmScriptTest, GpuPoolAsksForGpusAndSiteOptions) {
  SlurmPoolConfig pool = CpuPool();
  pool.gpus_per_node = 4;
  pool.account = "vision-lab";
  pool.qos = "high";
  pool.signal = "";
  pool.sbatch_options = {"--constraint=a100", "--mem=0"};
  absl::StatusOr<std::string> script = RenderSbatchScript(pool, Request());
  ASSERT_TRUE(script.ok()) << script.status();
  for (const char* line :
       {"#SBATCH --gpus-per-node=4\n", "#SBATCH --account=vision-lab\n",
        "#SBATCH --qos=high\n", "#SBATCH --constraint=a100\n", "#SBATCH --mem=0\n",
        "  --gpus 4 \\\n"}) {
    EXPECT_TRUE(absl::StrContains(*script, line)) << line << "\n" << *script;
  }
  EXPECT_FALSE(absl::StrContains(*script, "--signal")) << *script;
  EXPECT_FALSE(absl::StrContains(*script, "--cpu-slots")) << *script;
  // Every #SBATCH line comes before the first command.
  const size_t last_sbatch = script->rfind("#SBATCH");
  EXPECT_LT(last_sbatch, script->find("exec srun"));
}

TEST(SlurmScriptTest, TheWorkerGetsItsFlagsVerbatimAndAPerNodeName) {
  // Run the script with bash, with an srun that drops its own options and
  // runs the rest, and a worker that prints its argv: the argv is what a
  // real worker would get, quoting and all.
  testing::TempDir dir;
  const std::string bin = dir.File("bin");
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  std::ofstream(bin + "/srun") << "#!/bin/bash\n"
                                  "while [[ \"$1\" == --* ]]; do shift; done\n"
                                  "exec \"$@\"\n";
  std::ofstream(bin + "/hostname") << "#!/bin/bash\necho node7\n";
  std::ofstream(dir.File("worker")) << "#!/bin/bash\nprintf '%s\\n' \"$@\"\n";
  for (const std::string& f : {bin + "/srun", bin + "/hostname", dir.File("worker")}) {
    chmod(f.c_str(), 0755);
  }
  SlurmPoolConfig pool = CpuPool();
  pool.worker_path = dir.File("worker");
  pool.node_dir = "/scratch/it's here";
  pool.worker_args = {"--tls-ca", "/etc/ca dir/ca.pem", "$(touch /tmp/pwned)"};
  absl::StatusOr<std::string> script = RenderSbatchScript(pool, Request());
  ASSERT_TRUE(script.ok()) << script.status();

  CommandSpec spec;
  spec.argv = {"/bin/bash", "-s"};
  spec.env = {"PATH=" + bin + ":/usr/bin:/bin", "SLURM_JOB_ID=4242"};
  spec.stdin_data = *script;
  absl::StatusOr<CommandResult> r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->succeeded()) << r->err;
  std::vector<std::string> argv = absl::StrSplit(r->out, '\n', absl::SkipEmpty());
  EXPECT_EQ(argv, (std::vector<std::string>{"--coordinator",
                                            "10.0.0.1:50051",
                                            "--pool",
                                            "cpu",
                                            "--slurm-job-id",
                                            "4242",
                                            "--join-token-file",
                                            "/shared/tessera/join/alloc-12.token",
                                            "--cpu-slots",
                                            "2",
                                            "--gpus",
                                            "none",
                                            "--work-dir",
                                            "/scratch/it's here/tessera-slurm-4242-work",
                                            "--state-dir",
                                            "/scratch/it's here/tessera-slurm-4242-state",
                                            "--tls-ca",
                                            "/etc/ca dir/ca.pem",
                                            "$(touch /tmp/pwned)",
                                            "--name",
                                            "node7-slurm-4242"}));
}

TEST(SlurmScriptTest, RefusesARequestThatCannotBeRendered) {
  SlurmAllocationRequest r = Request();
  r.join_token_file = "relative/token";
  EXPECT_FALSE(RenderSbatchScript(CpuPool(), r).ok());
  r = Request();
  r.nodes = 3;  // the pool allows 2
  EXPECT_FALSE(RenderSbatchScript(CpuPool(), r).ok());
  r = Request();
  r.coordinator_address = "host:1\nrm -rf /";
  EXPECT_FALSE(RenderSbatchScript(CpuPool(), r).ok());
}

TEST(SlurmScriptTest, FormatsSlurmTimeWithDays) {
  EXPECT_EQ(FormatSlurmTime(absl::Hours(1)), "0-01:00:00");
  EXPECT_EQ(FormatSlurmTime(absl::Hours(50) + absl::Seconds(5)), "2-02:00:05");
  EXPECT_EQ(FormatSlurmTime(absl::Milliseconds(1500)), "0-00:00:02");
}

TEST(SlurmScriptTest, ShellQuoteKeepsEveryCharacter) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
}

}  // namespace
}  // namespace tessera
