// Runs the tessera-train binary as the worker would and checks its exit codes,
// output and metrics file.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/run_binary.h"
#include "worker/trainer/dist/gloo_communicator.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

using ::tessera::testing::RunResult;

std::string Binary() { return ::tessera::testing::BinaryPath("tessera-train"); }

RunResult RunTrainer(const std::vector<std::string>& args) {
  return ::tessera::testing::RunBinary("tessera-train", args);
}

// SIGKILLs `pid` if Disarm() has not been called within `limit`, so that a
// rank that hangs ends the test's blocking reads of its output.
class KillAfter {
 public:
  KillAfter(pid_t pid, absl::Duration limit)
      : thread_([this, pid, limit] {
          if (!disarmed_.WaitForNotificationWithTimeout(limit)) {
            fired_ = true;
            kill(pid, SIGKILL);
          }
        }) {}
  ~KillAfter() { Disarm(); }
  // Call before reaping the process, so that its pid is not signalled later.
  void Disarm() {
    if (!disarmed_.HasBeenNotified()) disarmed_.Notify();
    if (thread_.joinable()) thread_.join();
  }
  bool fired() const { return fired_; }

 private:
  absl::Notification disarmed_;
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: starts once the members above exist
};

std::vector<std::string> SmallSyntheticRun() {
  return {"--dataset=synthetic", "--train-subset=512", "--test-subset=128",
          "--batch-size=32",     "--max-steps=8",      "--metrics-every=4"};
}

std::string ParamHash(const std::string& output) {
  std::smatch match;
  static const std::regex kHash("param_hash=([0-9a-f]{16})");
  return std::regex_search(output, match, kHash) ? match[1].str() : "";
}

class TesseraTrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Binary())) {
      GTEST_SKIP() << Binary() << " is not built";
    }
  }
};

TEST_F(TesseraTrainCliTest, UsageErrorsExitWithCodeTwoAndNameTheFlag) {
  RunResult bad_value = RunTrainer({"--batch-size=0"});
  EXPECT_EQ(bad_value.exit_code, 2);
  EXPECT_THAT(bad_value.output, HasSubstr("--batch-size"));
  RunResult unknown = RunTrainer({"--frobnicate=1"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.output, HasSubstr("--frobnicate"));
  RunResult no_coordinator = RunTrainer({"--world-size=2"});
  EXPECT_EQ(no_coordinator.exit_code, 2);
}

TEST_F(TesseraTrainCliTest, StandaloneRunPrintsProgressAndWritesMetricsFile) {
  const std::string metrics =
      (std::filesystem::path(::testing::TempDir()) / "cli_metrics.jsonl").string();
  std::vector<std::string> args = SmallSyntheticRun();
  args.push_back("--metrics-file=" + metrics);
  const RunResult run = RunTrainer(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("[rank 0] step 4 | loss="));
  EXPECT_THAT(run.output, HasSubstr("images_per_sec="));
  EXPECT_THAT(run.output, HasSubstr("test_accuracy="));
  EXPECT_EQ(ParamHash(run.output).size(), 16u);

  std::ifstream in(metrics);
  const std::string contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_THAT(contents, HasSubstr("\"name\":\"loss\""));
  EXPECT_THAT(contents, HasSubstr("\"name\":\"test_accuracy\""));
  std::filesystem::remove(metrics);
}

TEST_F(TesseraTrainCliTest, MissingDataExitsWithCodeOneAndSaysWhy) {
  const RunResult run = RunTrainer({"--data-dir=/nonexistent-tessera-data"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("/nonexistent-tessera-data"));
}

TEST_F(TesseraTrainCliTest, TwoProcessesWithAStaticStoreTrainInSync) {
  int port = 0;
  {
    // A port that was free a moment ago; rank 0 binds it again below.
    auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
    ASSERT_TRUE(probe.ok()) << probe.status();
    port = (*probe)->port();
  }
  auto rank_args = [&](int rank) {
    std::vector<std::string> args = SmallSyntheticRun();
    args.push_back(absl::StrCat("--rendezvous-store=127.0.0.1:", port));
    args.push_back("--world-size=2");
    args.push_back(absl::StrCat("--rank=", rank));
    return args;
  };
  std::future<RunResult> rank0 = std::async(std::launch::async, RunTrainer, rank_args(0));
  std::future<RunResult> rank1 = std::async(std::launch::async, RunTrainer, rank_args(1));
  const RunResult r0 = rank0.get();
  const RunResult r1 = rank1.get();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_THAT(r0.output, HasSubstr("world 2 (gloo)"));
  EXPECT_FALSE(ParamHash(r0.output).empty());
  EXPECT_EQ(ParamHash(r0.output), ParamHash(r1.output));
}

// Rank 1 runs with its stdout piped here; after its first training step it is
// stopped (SIGSTOP): alive and connected but silent, as a hung rank. Rank 0,
// waiting in an all-reduce, must end within the short --collective-timeout with
// exit code 4 and a reason naming the pending collective.
TEST_F(TesseraTrainCliTest, AHungPeerEndsTheWaitingRankWithCodeFourNamingTheCollective) {
  int port = 0;
  {
    auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
    ASSERT_TRUE(probe.ok()) << probe.status();
    port = (*probe)->port();
  }
  auto rank_args = [&](int rank) {
    return std::vector<std::string>{"--dataset=synthetic",
                                    "--train-subset=4096",
                                    "--test-subset=64",
                                    "--batch-size=32",
                                    "--epochs=100",
                                    "--metrics-every=1",
                                    "--collective-timeout=2s",
                                    absl::StrCat("--rendezvous-store=127.0.0.1:", port),
                                    "--world-size=2",
                                    absl::StrCat("--rank=", rank)};
  };
  std::future<RunResult> rank0 = std::async(std::launch::async, RunTrainer, rank_args(0));

  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const std::string binary = Binary();
  std::vector<std::string> args = rank_args(1);
  std::vector<char*> argv{const_cast<char*>(binary.c_str())};
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t rank1 = fork();
  ASSERT_GE(rank1, 0);
  if (rank1 == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  KillAfter guard(rank1, absl::Minutes(5));
  FILE* from_rank1 = fdopen(out[0], "r");
  // Blocks until rank 1 reports its first step (or exits, or the guard kills it).
  bool training = false;
  char line[4096];
  while (!training && std::fgets(line, sizeof(line), from_rank1) != nullptr) {
    training = std::strstr(line, "[rank 1] step ") != nullptr;
  }
  kill(rank1, SIGSTOP);
  const RunResult r0 = rank0.get();
  guard.Disarm();
  kill(rank1, SIGKILL);
  waitpid(rank1, nullptr, 0);
  std::fclose(from_rank1);
  ASSERT_FALSE(guard.fired()) << "rank 1 ran past 5 minutes and was killed";

  ASSERT_TRUE(training) << "rank 1 never started training; rank 0:\n" << r0.output;
  EXPECT_EQ(r0.exit_code, 4) << r0.output;
  EXPECT_THAT(r0.output, HasSubstr("tessera-train: collective timeout: allreduce #"))
      << r0.output;
  EXPECT_THAT(r0.output, HasSubstr("(limit 2.0 s); communicator aborted, exiting "
                                   "with code 4"))
      << r0.output;
}

// SIGUSR1 to one rank only (a worker signals its own ranks): both ranks
// checkpoint at the step they agreed on, say so, and exit with code 5; the
// job's normal resume path continues from that checkpoint.
TEST_F(TesseraTrainCliTest, SigUsr1ToOneRankCheckpointsBothAtOneStepAndExitsFive) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    absl::StrCat("cli_preempt_", ::getpid());
  std::filesystem::remove_all(dir);
  auto free_port = [] {
    auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
    EXPECT_TRUE(probe.ok()) << probe.status();
    return probe.ok() ? (*probe)->port() : 0;
  };
  auto rank_args = [&](int port, int rank, bool resume) {
    std::vector<std::string> args = {"--dataset=synthetic",
                                     "--train-subset=2048",
                                     "--test-subset=64",
                                     "--batch-size=32",
                                     "--max-steps=30",
                                     "--metrics-every=1",
                                     "--checkpoint-dir=" + dir.string(),
                                     absl::StrCat("--resume=", resume ? "true" : "false"),
                                     absl::StrCat("--rendezvous-store=127.0.0.1:", port),
                                     "--world-size=2",
                                     absl::StrCat("--rank=", rank)};
    return args;
  };
  const int port = free_port();
  std::future<RunResult> rank0 =
      std::async(std::launch::async, RunTrainer, rank_args(port, 0, false));

  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const std::string binary = Binary();
  std::vector<std::string> args = rank_args(port, 1, false);
  std::vector<char*> argv{const_cast<char*>(binary.c_str())};
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t rank1 = fork();
  ASSERT_GE(rank1, 0);
  if (rank1 == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  KillAfter guard(rank1, absl::Minutes(5));
  FILE* from_rank1 = fdopen(out[0], "r");
  std::string output1;
  bool training = false;
  char line[4096];
  while (!training && std::fgets(line, sizeof(line), from_rank1) != nullptr) {
    output1 += line;
    training = std::strstr(line, "[rank 1] step 1 ") != nullptr;
  }
  kill(rank1, SIGUSR1);
  while (std::fgets(line, sizeof(line), from_rank1) != nullptr) output1 += line;
  std::fclose(from_rank1);
  int status = 0;
  // Rank 1 has closed its output: it is exiting, or the guard killed it.
  guard.Disarm();
  waitpid(rank1, &status, 0);
  ASSERT_FALSE(guard.fired()) << "rank 1 ran past 5 minutes and was killed:\n" << output1;
  const RunResult r0 = rank0.get();

  ASSERT_TRUE(training) << output1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << output1;
  EXPECT_EQ(r0.exit_code, 5) << r0.output;
  std::smatch match;
  static const std::regex kPreempted(
      "preempted: checkpointed at step ([0-9]+); exiting with code 5");
  ASSERT_TRUE(std::regex_search(r0.output, match, kPreempted)) << r0.output;
  const std::string step = match[1].str();
  EXPECT_THAT(output1, HasSubstr("preempted: checkpointed at step " + step +
                                 "; exiting with code 5"));
  std::ifstream latest(dir / "latest");
  std::string published;
  std::getline(latest, published);
  EXPECT_EQ(published, absl::StrCat("step-", std::string(12 - step.size(), '0'), step));

  const int again = free_port();
  std::future<RunResult> resumed0 =
      std::async(std::launch::async, RunTrainer, rank_args(again, 0, true));
  std::future<RunResult> resumed1 =
      std::async(std::launch::async, RunTrainer, rank_args(again, 1, true));
  for (const RunResult& resumed : {resumed0.get(), resumed1.get()}) {
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_THAT(resumed.output, HasSubstr("resumed at step " + step));
    EXPECT_THAT(resumed.output, HasSubstr("done: 30 steps"));
  }
  std::filesystem::remove_all(dir);
}

TEST_F(TesseraTrainCliTest, MixedPrecisionOnTheCpuIsAUsageError) {
  std::vector<std::string> args = SmallSyntheticRun();
  args.push_back("--device=cpu");
  args.push_back("--precision=bf16");
  const RunResult run = RunTrainer(args);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("--precision=bf16 needs a CUDA device"));
}

// Real processes, each with its own LibTorch generator: after a crash (here: the
// later checkpoints never became `latest`) both ranks resume with their own RNG
// and loader state and end exactly where the uninterrupted run ended.
TEST_F(TesseraTrainCliTest, TwoProcessesResumeFromACheckpointExactly) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    absl::StrCat("cli_checkpoints_", ::getpid());
  std::filesystem::remove_all(dir);
  auto run_pair = [&](bool resume) {
    int port = 0;
    {
      auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
      EXPECT_TRUE(probe.ok()) << probe.status();
      if (!probe.ok()) return std::vector<RunResult>{};
      port = (*probe)->port();
    }
    auto rank_args = [&](int rank) {
      std::vector<std::string> args = SmallSyntheticRun();
      args.push_back("--dropout=0.1");
      args.push_back("--checkpoint-every=4");
      args.push_back("--checkpoint-dir=" + dir.string());
      args.push_back(absl::StrCat("--resume=", resume ? "true" : "false"));
      args.push_back(absl::StrCat("--rendezvous-store=127.0.0.1:", port));
      args.push_back("--world-size=2");
      args.push_back(absl::StrCat("--rank=", rank));
      return args;
    };
    std::future<RunResult> rank0 =
        std::async(std::launch::async, RunTrainer, rank_args(0));
    std::future<RunResult> rank1 =
        std::async(std::launch::async, RunTrainer, rank_args(1));
    return std::vector<RunResult>{rank0.get(), rank1.get()};
  };
  const std::vector<RunResult> uninterrupted = run_pair(false);
  ASSERT_EQ(uninterrupted.size(), 2u);
  ASSERT_EQ(uninterrupted[0].exit_code, 0) << uninterrupted[0].output;
  ASSERT_EQ(uninterrupted[1].exit_code, 0) << uninterrupted[1].output;
  {
    std::ofstream latest(dir / "latest", std::ios::trunc);
    latest << "step-000000000004\n";
  }
  const std::vector<RunResult> resumed = run_pair(true);
  ASSERT_EQ(resumed.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(resumed[rank].exit_code, 0) << resumed[rank].output;
    EXPECT_THAT(resumed[rank].output, HasSubstr("resumed at step 4"));
    EXPECT_EQ(ParamHash(resumed[rank].output), ParamHash(uninterrupted[rank].output))
        << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

// The figure after `key` (e.g. "test_accuracy=") in the run's output.
std::string FigureAfter(const std::string& output, const std::string& key) {
  const size_t at = output.rfind(key);
  if (at == std::string::npos) return "";
  return output.substr(at + key.size(), 6);
}

TEST_F(TesseraTrainCliTest, EvalOnlyGivesTheTrainingRunsFinalTopOneOnItsCheckpoint) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "cli_eval_checkpoints";
  std::filesystem::remove_all(dir);
  std::vector<std::string> train = SmallSyntheticRun();
  train.push_back("--checkpoint-dir=" + dir.string());
  const RunResult trained = RunTrainer(train);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string final_top1 = FigureAfter(trained.output, "test_accuracy=");
  ASSERT_FALSE(final_top1.empty()) << trained.output;

  const std::string metrics =
      (std::filesystem::path(::testing::TempDir()) / "cli_eval_metrics.jsonl").string();
  std::vector<std::string> eval = SmallSyntheticRun();
  for (const char* flag : {"--eval-only=true", "--resume=true", "--lr=0"}) {
    eval.push_back(flag);
  }
  eval.push_back("--checkpoint-dir=" + dir.string());
  eval.push_back("--metrics-file=" + metrics);
  const RunResult evaluated = RunTrainer(eval);
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_EQ(FigureAfter(evaluated.output, "eval on test: top1="), final_top1)
      << evaluated.output;
  EXPECT_THAT(evaluated.output, HasSubstr("step 8"));
  EXPECT_THAT(evaluated.output, HasSubstr("class 9 9:"));
  std::ifstream in(metrics);
  const std::string points((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
  for (const char* name : {"eval_top1", "eval_top5", "eval_loss", "eval_samples"}) {
    EXPECT_THAT(points, HasSubstr(name));
  }
  std::filesystem::remove_all(dir);
}

// --mean and --std reach the in-memory datasets too (an evaluation of
// published weights normalises as they were trained): the same checkpoint
// scores another loss with them, and one-channel data refuses three different
// means.
TEST_F(TesseraTrainCliTest, EvalOnlyOfInMemoryDataNormalisesWithTheGivenMeanAndStd) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "cli_eval_normalised";
  std::filesystem::remove_all(dir);
  std::vector<std::string> train = SmallSyntheticRun();
  train.push_back("--checkpoint-dir=" + dir.string());
  const RunResult trained = RunTrainer(train);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;

  std::vector<std::string> eval = SmallSyntheticRun();
  for (const char* flag : {"--eval-only", "--resume", "--lr=0"}) eval.push_back(flag);
  eval.push_back("--checkpoint-dir=" + dir.string());
  const RunResult own = RunTrainer(eval);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  std::vector<std::string> given = eval;
  for (const char* flag : {"--mean=0.9", "--mean=0.9", "--mean=0.9", "--std=0.05",
                           "--std=0.05", "--std=0.05"}) {
    given.push_back(flag);
  }
  const RunResult normalised = RunTrainer(given);
  ASSERT_EQ(normalised.exit_code, 0) << normalised.output;
  const std::string own_loss = FigureAfter(own.output, " loss=");
  ASSERT_FALSE(own_loss.empty()) << own.output;
  EXPECT_NE(FigureAfter(normalised.output, " loss="), own_loss) << normalised.output;

  std::vector<std::string> unequal = eval;
  for (const char* flag : {"--mean=0.1", "--mean=0.2", "--mean=0.3"}) {
    unequal.push_back(flag);
  }
  const RunResult refused = RunTrainer(unequal);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("the data has one channel: mean must give it "
                                        "three equal values, got [0.1, 0.2, 0.3]"));
  EXPECT_THAT(refused.output, ::testing::Not(HasSubstr("top1=")));
  std::filesystem::remove_all(dir);
}

TEST_F(TesseraTrainCliTest, EvalOnlyOfAMissingCheckpointFailsBeforeAnyWork) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "cli_eval_no_checkpoints";
  std::filesystem::create_directories(dir);
  std::vector<std::string> eval = SmallSyntheticRun();
  for (const char* flag : {"--eval-only=true", "--resume=true"}) eval.push_back(flag);
  eval.push_back("--checkpoint-dir=" + dir.string());
  const RunResult run = RunTrainer(eval);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("no checkpoint in " + dir.string()));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("top1=")));
  const RunResult no_model = RunTrainer({"--eval-only=true", "--dataset=synthetic"});
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_THAT(no_model.output, HasSubstr("--eval-only needs a model"));
}

}  // namespace
}  // namespace tessera::trainer
