// SlurmCommandClient (coordinator/slurm/slurm_command_client.h): output parsing and
// argument checks without Slurm, then sbatch/squeue/scancel against a real one-node Slurm
// started by the test (tests/testing/slurm_cluster.h; needs root, skipped otherwise,
// failed when TESSERA_REQUIRE_SLURM=1). Prints FIGURE slurm_submit_to_running_s.
#include "coordinator/slurm/slurm_command_client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/core/slurm/slurm_script.h"
#include "gtest/gtest.h"
#include "tests/testing/slurm_cluster.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::ReadFile;
using ::tessera::testing::SlurmTest;

TEST(SlurmCommandClientParseTest, ParsableOutputGivesTheJobId) {
  EXPECT_EQ(*ParseSbatchParsable("1234\n"), "1234");
  EXPECT_EQ(*ParseSbatchParsable("1234;cluster-a\n"), "1234");
  EXPECT_EQ(*ParseSbatchParsable("sbatch: warning: something\n77\n"), "77");
  EXPECT_FALSE(ParseSbatchParsable("").ok());
  EXPECT_FALSE(ParseSbatchParsable("Submitted batch job 5\n").ok());
}

TEST(SlurmCommandClientParseTest, SqueueLinesGiveStateReasonAndNodes) {
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> jobs =
      ParseSqueue("12|PD|Resources|\n13|R|None|node[1-2]\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->at("12").state, "PD");
  EXPECT_EQ(jobs->at("12").reason, "Resources");
  EXPECT_EQ(jobs->at("12").nodes, "");
  EXPECT_EQ(jobs->at("13").nodes, "node[1-2]");
  EXPECT_FALSE(ParseSqueue("12|PD\n").ok());
}

TEST(SlurmCommandClientParseTest, RefusesIdsAndSignalsThatCouldBeOptions) {
  // bin_dir does not exist: a command that ran would fail with NotFound.
  SlurmCommandClient cli({.bin_dir = "/nonexistent"});
  EXPECT_EQ(cli.Cancel("--user=alice").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cli.Cancel("12 13").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cli.Cancel("12", "USR1 --full").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cli.Query({"12", "-u"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cli.Submit({.script = ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A valid id reaches the (missing) program.
  EXPECT_EQ(cli.Cancel("12").code(), absl::StatusCode::kNotFound);
}

class SlurmCommandClientTest : public SlurmTest {
 protected:
  SlurmCommandClient Cli() const {
    return SlurmCommandClient(
        {.slurm_conf = cluster_->conf_path(), .timeout = absl::Seconds(20)});
  }
  // A batch script that runs `step` as one srun step, its output in `out`.
  std::string Script(const std::string& out, const std::string& step,
                     const std::string& extra = "") const {
    return absl::StrCat("#!/bin/bash\n#SBATCH --output=", out, "\n#SBATCH --no-requeue\n",
                        extra, "exec srun ", step, "\n");
  }
  std::string WriteExecutable(const std::string& name, const std::string& body) const {
    const std::string path = cluster_->dir() + "/" + name;
    std::ofstream(path) << body;
    chmod(path.c_str(), 0755);
    return path;
  }
  static bool WaitForText(const std::string& path, const std::string& text) {
    for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
      if (absl::StrContains(ReadFile(path), text)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Polls Query until the job's state is `state`.
  absl::StatusOr<SlurmJobInfo> WaitForState(SlurmCommandClient& cli,
                                            const std::string& id,
                                            const std::string& state) {
    SlurmJobInfo last;
    for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
      absl::StatusOr<std::map<std::string, SlurmJobInfo>> jobs = cli.Query({id});
      if (!jobs.ok()) return jobs.status();
      if (jobs->contains(id)) last = jobs->at(id);
      if (last.state == state) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("job ", id, " not ", state, "; last '", last.state, "'"));
  }
};

TEST_F(SlurmCommandClientTest, SubmitQueryAndCancelFollowTheJob) {
  SlurmCommandClient cli = Cli();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> id =
      cli.Submit({.script = Script("/dev/null", "/bin/sleep 300")});
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<SlurmJobInfo> running = WaitForState(cli, *id, "R");
  ASSERT_TRUE(running.ok()) << running.status() << cluster_->DaemonLogs();
  std::cout << "FIGURE slurm_submit_to_running_s="
            << absl::ToDoubleSeconds(absl::Now() - t0) << "\n";
  EXPECT_EQ(running->nodes, cluster_->node());

  ASSERT_TRUE(cli.Cancel(*id).ok());
  absl::StatusOr<SlurmJobInfo> cancelled = WaitForState(cli, *id, "CA");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  // Cancelling again, or a job Slurm never had, is not an error.
  EXPECT_TRUE(cli.Cancel(*id).ok());
  EXPECT_TRUE(cli.Cancel("999999").ok());
  // An id Slurm does not know is simply absent.
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> none = cli.Query({"999999"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> mixed = cli.Query({"999999", *id});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->size(), 1u);
}

TEST_F(SlurmCommandClientTest, PendingJobShowsWhyItWaits) {
  SlurmCommandClient cli = Cli();
  // The first job takes both CPUs of the node; the second must wait.
  absl::StatusOr<std::string> big = cli.Submit(
      {.script = Script("/dev/null", "/bin/sleep 300", "#SBATCH --cpus-per-task=2\n")});
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(WaitForState(cli, *big, "R").ok());
  absl::StatusOr<std::string> waiting =
      cli.Submit({.script = Script("/dev/null", "/bin/true")});
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  SlurmJobInfo info;
  for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    absl::StatusOr<std::map<std::string, SlurmJobInfo>> jobs =
        cli.Query({*big, *waiting});
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_TRUE(jobs->contains(*waiting));
    info = jobs->at(*waiting);
    if (info.reason == "Resources") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(info.state, "PD");
  EXPECT_EQ(info.reason, "Resources");
}

TEST_F(SlurmCommandClientTest, SubmitErrorCarriesWhatSbatchSaid) {
  SlurmCommandClient cli = Cli();
  absl::StatusOr<std::string> id =
      cli.Submit({.script = Script("/dev/null", "/bin/true",
                                   "#SBATCH --partition=no-such-partition\n")});
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "invalid partition") ||
              absl::StrContains(id.status().message(), "Invalid partition"))
      << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "sbatch failed (exit code"))
      << id.status();
}

TEST_F(SlurmCommandClientTest, SignalReachesTheSrunStepAndEndedJobIsNotFound) {
  SlurmCommandClient cli = Cli();
  const std::string out = cluster_->dir() + "/step.out";
  const std::string step = WriteExecutable("step.sh",
                                           "#!/bin/bash\n"
                                           "trap 'echo got USR1; exit 0' USR1\n"
                                           "echo started\n"
                                           "while true; do sleep 0.1; done\n");
  absl::StatusOr<std::string> id = cli.Submit({.script = Script(out, step)});
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForText(out, "started")) << cluster_->DaemonLogs();
  ASSERT_TRUE(cli.Cancel(*id, "USR1").ok());
  ASSERT_TRUE(WaitForText(out, "got USR1")) << ReadFile(out);
  ASSERT_TRUE(WaitForState(cli, *id, "CD").ok());
  EXPECT_EQ(cli.Cancel(*id, "USR1").code(), absl::StatusCode::kNotFound);
}

TEST_F(SlurmCommandClientTest, SubmitAsAnotherUserRunsTheJobAsThatUser) {
  absl::StatusOr<UnixAccount> nobody = LookUpUnixAccount("nobody");
  ASSERT_TRUE(nobody.ok()) << nobody.status();
  ASSERT_TRUE(
      SlurmCommandClient::CanSubmitAsOtherUsers());  // SlurmTest runs as root only
  // A directory the job, as nobody, may write its output into.
  const std::string outdir = cluster_->dir() + "/out";
  ASSERT_EQ(mkdir(outdir.c_str(), 0777), 0);
  chmod(outdir.c_str(), 01777);
  SlurmCommandClient cli = Cli();
  absl::StatusOr<std::string> id = cli.Submit(
      {.script = Script(outdir + "/%u-%j.out", "/usr/bin/id -un"), .run_as = "nobody"});
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForState(cli, *id, "CD").ok()) << cluster_->DaemonLogs();
  const std::string path = absl::StrCat(outdir, "/nobody-", *id, ".out");
  EXPECT_EQ(absl::StripAsciiWhitespace(ReadFile(path)), "nobody") << path;
  absl::StatusOr<std::string> user =
      cluster_->Run({"squeue", "-h", "--states=all", "-j", *id, "-o", "%u"});
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ(absl::StripAsciiWhitespace(*user), "nobody");
  // An account that does not exist is refused before sbatch runs.
  EXPECT_EQ(cli.Submit({.script = Script("/dev/null", "/bin/true"),
                        .run_as = "no-such-user-tessera"})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SlurmCommandClientTest, RenderedPoolScriptRunsTheWorkerAndSignalReachesIt) {
  // The script slurm_script.h renders, submitted to the real sbatch: Slurm
  // accepts its #SBATCH lines, srun starts the worker with its flags and a
  // per-node name, and scancel --signal=USR1 reaches the worker process.
  const std::string args_file = cluster_->dir() + "/worker.args";
  const std::string worker = WriteExecutable(
      "fake-worker",
      absl::StrCat("#!/bin/bash\n"
                   "trap 'echo drained >> ",
                   args_file, "; exit 0' USR1\n", "printf '%s\\n' \"$@\" > ", args_file,
                   ".tmp\n", "mv ", args_file, ".tmp ", args_file, "\n",
                   "while true; do sleep 0.1; done\n"));
  SlurmPoolConfig pool;
  pool.name = "cpu";
  pool.partition = cluster_->partition();
  pool.cpus_per_node = 2;
  pool.time_limit = absl::Minutes(10);
  pool.worker_path = worker;
  absl::StatusOr<std::string> script =
      RenderSbatchScript(pool, {.job_id = 12,
                                .nodes = 1,
                                .coordinator_address = "127.0.0.1:50051",
                                .join_token_file = "/nonexistent/join.token"});
  ASSERT_TRUE(script.ok()) << script.status();
  SlurmCommandClient cli = Cli();
  absl::StatusOr<std::string> id = cli.Submit({.script = *script});
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForText(args_file, "--name")) << cluster_->DaemonLogs();
  EXPECT_EQ(
      ReadFile(args_file),
      absl::StrCat("--coordinator\n127.0.0.1:50051\n--pool\ncpu\n--slurm-job-id\n", *id,
                   "\n--join-token-file\n/nonexistent/join.token\n--cpu-slots\n2\n"
                   "--gpus\nnone\n--work-dir\n/tmp/tessera-slurm-",
                   *id, "-work\n--state-dir\n/tmp/tessera-slurm-", *id,
                   "-state\n--name\n", cluster_->node(), "-slurm-", *id, "\n"));
  absl::StatusOr<std::string> shown =
      cluster_->Run({"squeue", "-h", "-j", *id, "-o", "%j|%l|%C"});
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(absl::StripAsciiWhitespace(*shown), "tessera-cpu-job12|10:00|2");
  ASSERT_TRUE(cli.Cancel(*id, "USR1").ok());
  ASSERT_TRUE(WaitForText(args_file, "drained")) << ReadFile(args_file);
  EXPECT_TRUE(WaitForState(cli, *id, "CD").ok());
}

}  // namespace
}  // namespace tessera
