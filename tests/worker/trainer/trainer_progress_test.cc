// The training loop with real ranks (Gloo on loopback, one thread per rank):
// the progress it reports, the preemption stop the ranks agree on, and the
// --fault hook's hung and slow ranks as the coordinator's rank watch sees them
// through the progress reports.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fault_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/gloo_group.h"
#include "worker/trainer/data/synthetic_dataset.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/fault_injector.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/progress.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

ImageDataset Synthetic(int64_t size, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = 3;
  options.split = split;
  return *MakeSyntheticDataset(options);
}

TrainerOptions SmallRun() {
  TrainerOptions options;
  options.dataset = "synthetic";
  options.batch_size = 16;
  options.optimizer = "sgd";
  options.lr = 3e-3;
  options.max_steps = 12;
  options.metrics_every = 4;
  options.epochs = 10;
  return options;
}

std::string FreshDirectory(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// What each rank of a two-rank run gets and gives back.
struct RankRun {
  TrainerLoopOptions loop;
  std::optional<TrainingOutcome> outcome;
  std::string error;
};

// Trains two ranks, one thread each, with their own loop options.
void TrainTwoRanks(const TrainerOptions& options, std::vector<RankRun>& runs) {
  const ImageDataset train = Synthetic(512, Split::kTrain);
  const ImageDataset test = Synthetic(64, Split::kTest);
  testing::RunGlooGroup(
      2,
      [&](int rank, Communicator& communicator) {
        MetricsReporterOptions reporting;
        reporting.flush_interval = absl::InfiniteDuration();
        auto reporter = MetricsReporter::Create(reporting, nullptr);
        ASSERT_TRUE(reporter.ok());
        RankRun& run = runs[static_cast<size_t>(rank)];
        Trainer trainer(options, train, test, communicator, **reporter, run.loop);
        absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
        if (outcome.ok()) {
          run.outcome = *outcome;
        } else {
          run.error = outcome.status().ToString();
        }
      },
      absl::Seconds(60));
}

TEST(TrainerProgressTest, ReportsEveryStepAndEndsDone) {
  RealClock clock;
  std::vector<RankRun> runs(2);
  ProgressTracker progress0(clock);
  ProgressTracker progress1(clock);
  runs[0].loop.progress = &progress0;
  runs[1].loop.progress = &progress1;
  TrainTwoRanks(SmallRun(), runs);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].outcome.has_value()) << runs[rank].error;
  }
  for (const ProgressTracker* progress : {&progress0, &progress1}) {
    const ProgressReport report = progress->Snapshot();
    EXPECT_EQ(report.step, 12);
    EXPECT_EQ(report.phase, "done");
    EXPECT_EQ(report.window_steps, 12);
    EXPECT_GT(report.step_time_ms, 0);
    std::map<std::string, double> ms(report.phase_ms.begin(), report.phase_ms.end());
    for (const char* phase : {"data", "forward", "backward", "collective", "optimizer"}) {
      EXPECT_GT(ms[phase], 0) << phase;
    }
    EXPECT_EQ(ms.count("eval"), 0u);
  }
}

// Rank 1 alone is asked to stop; both ranks stop after the same step, both
// write their part of the checkpoint there, and a resumed run continues to
// the same parameters as a run that was never interrupted.
TEST(TrainerPreemptionTest, RanksAgreeOnTheStepWhenOnlyOneIsAskedToStop) {
  TrainerOptions options = SmallRun();
  options.checkpoint_dir = FreshDirectory("preempt");
  options.checkpoint_every = 100;  // only the preemption and the end

  std::vector<RankRun> uninterrupted(2);
  TrainTwoRanks(options, uninterrupted);
  ASSERT_TRUE(uninterrupted[0].outcome.has_value()) << uninterrupted[0].error;
  std::filesystem::remove_all(options.checkpoint_dir);
  std::filesystem::create_directories(options.checkpoint_dir);

  // Rank 1's flag goes up while it trains (once it has done 3 steps), rank
  // 0's never does.
  RealClock clock;
  ProgressTracker progress1(clock);
  std::atomic<bool> stop0{false};
  std::atomic<bool> stop1{false};
  std::vector<RankRun> runs(2);
  runs[0].loop.stop_requested = &stop0;
  runs[1].loop.stop_requested = &stop1;
  runs[1].loop.progress = &progress1;
  std::atomic<bool> finished{false};
  std::thread signaller([&] {
    while (!finished.load() && progress1.step() < 3)
      absl::SleepFor(absl::Milliseconds(1));
    stop1.store(true);
  });
  TrainTwoRanks(options, runs);
  finished.store(true);
  signaller.join();

  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].outcome.has_value()) << runs[rank].error;
    EXPECT_TRUE(runs[rank].outcome->preempted) << "rank " << rank;
    EXPECT_TRUE(runs[rank].outcome->checkpointed) << "rank " << rank;
  }
  const int64_t stopped = runs[0].outcome->steps;
  EXPECT_EQ(runs[1].outcome->steps, stopped);
  EXPECT_GE(stopped, 3);
  EXPECT_LT(stopped, 12);
  std::cout << "FIGURE preempt_flag_at_step=3 preempt_stopped_after_step=" << stopped
            << std::endl;
  const CheckpointDirectory dir(options.checkpoint_dir);
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(stopped));
  EXPECT_TRUE(std::filesystem::exists(dir.RankPath(stopped, 0)));
  EXPECT_TRUE(std::filesystem::exists(dir.RankPath(stopped, 1)));

  // The normal resume path picks it up.
  options.resume = true;
  std::vector<RankRun> resumed(2);
  TrainTwoRanks(options, resumed);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(resumed[rank].outcome.has_value()) << resumed[rank].error;
    EXPECT_FALSE(resumed[rank].outcome->preempted);
    EXPECT_EQ(resumed[rank].outcome->resumed_from, stopped);
    EXPECT_EQ(resumed[rank].outcome->steps, 12);
    EXPECT_EQ(resumed[rank].outcome->param_hash, uninterrupted[rank].outcome->param_hash)
        << "rank " << rank;
  }
}

TEST(TrainerPreemptionTest, WithoutACheckpointDirectoryTheRanksStillStopTogether) {
  std::atomic<bool> stop0{true};  // asked before the first step
  std::atomic<bool> stop1{false};
  std::vector<RankRun> runs(2);
  runs[0].loop.stop_requested = &stop0;
  runs[1].loop.stop_requested = &stop1;
  TrainTwoRanks(SmallRun(), runs);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].outcome.has_value()) << runs[rank].error;
    EXPECT_TRUE(runs[rank].outcome->preempted);
    EXPECT_FALSE(runs[rank].outcome->checkpointed);
    EXPECT_EQ(runs[rank].outcome->steps, 1);  // the vote rode the first step
  }
}

TEST(TrainerPreemptionTest, AStopDuringTheLastStepLetsTheRunComplete) {
  TrainerOptions options = SmallRun();
  options.max_steps = 1;
  std::atomic<bool> stop{true};
  std::vector<RankRun> runs(2);
  runs[0].loop.stop_requested = &stop;
  runs[1].loop.stop_requested = &stop;
  TrainTwoRanks(options, runs);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].outcome.has_value()) << runs[rank].error;
    EXPECT_FALSE(runs[rank].outcome->preempted);
    EXPECT_EQ(runs[rank].outcome->steps, 1);
    EXPECT_GT(runs[rank].outcome->test_accuracy, 0);
  }
}

// The alive-but-stuck rank: rank 1 hangs in data at step 3 while its peer
// waits for it in the bucket all-reduce. Their progress reports name the
// culprit: rank 1 at step 3 in "data", rank 0 at step 3 in "collective" on
// the gradient all-reduce. Released, both finish.
TEST(TrainerFaultTest, AHungRankReportsItsStepAndPhaseWhileItsPeerWaitsOnTheCollective) {
  RealClock clock;
  ProgressTracker progress0(clock);
  ProgressTracker progress1(clock);
  absl::Notification hanging;
  absl::Notification release;
  FaultInjectorOptions faulting;
  faulting.hang = [&] {
    hanging.Notify();
    release.WaitForNotification();
  };
  std::vector<std::string> logs;
  faulting.log = [&logs](const std::string& line) { logs.push_back(line); };
  const FaultSpec spec = *ParseFaultSpec("hang:rank=1,step=3,phase=data");
  FaultInjector fault0(spec, 0, 1, faulting);
  FaultInjector fault1(spec, 1, 1, faulting);
  std::vector<RankRun> runs(2);
  runs[0].loop.progress = &progress0;
  runs[0].loop.fault = &fault0;
  runs[1].loop.progress = &progress1;
  runs[1].loop.fault = &fault1;

  std::optional<ProgressReport> culprit;
  std::optional<ProgressReport> peer;
  std::thread observer([&] {
    ASSERT_TRUE(hanging.WaitForNotificationWithTimeout(absl::Seconds(120)));
    // Wait until rank 0 is blocked on rank 1 in step 4's gradient all-reduce
    // (it may still be leaving step 3's when rank 1 starts hanging).
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up &&
           (progress0.step() < 3 || progress0.phase() != RankPhase::kCollective ||
            progress0.Snapshot().collective.empty())) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    absl::SleepFor(absl::Milliseconds(200));  // both stay where they are
    culprit = progress1.Snapshot();
    peer = progress0.Snapshot();
    release.Notify();
  });
  TrainTwoRanks(SmallRun(), runs);
  observer.join();

  ASSERT_TRUE(culprit.has_value() && peer.has_value());
  EXPECT_EQ(culprit->step, 3);
  EXPECT_EQ(culprit->phase, "data");
  EXPECT_GE(culprit->phase_elapsed_ms, 200);
  EXPECT_EQ(peer->step, 3);
  EXPECT_EQ(peer->phase, "collective");
  EXPECT_THAT(peer->collective, HasSubstr("allreduce #"));
  EXPECT_THAT(peer->collective, HasSubstr("(bucket "));
  EXPECT_GE(peer->phase_elapsed_ms, 200);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_THAT(logs[0], HasSubstr("rank 1 hangs at step 3 in data"));
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(runs[rank].outcome.has_value()) << runs[rank].error;
    EXPECT_EQ(runs[rank].outcome->steps, 12);
  }
}

// A straggler: rank 0 sleeps 150 ms more in forward every step. Its reports
// show the time in its own forward; its peer's show the same time waiting in
// "collective".
TEST(TrainerFaultTest, ASlowRankShowsItsOwnPhaseAndItsPeerWaitsInCollective) {
  RealClock clock;
  ProgressTracker progress0(clock);
  ProgressTracker progress1(clock);
  const FaultSpec spec = *ParseFaultSpec("slow:rank=0,phase=forward,ms=150");
  FaultInjector fault0(spec, 0, 1);
  FaultInjector fault1(spec, 1, 1);
  std::vector<RankRun> runs(2);
  runs[0].loop.progress = &progress0;
  runs[0].loop.fault = &fault0;
  runs[1].loop.progress = &progress1;
  runs[1].loop.fault = &fault1;
  TrainTwoRanks(SmallRun(), runs);
  ASSERT_TRUE(runs[0].outcome.has_value()) << runs[0].error;
  ASSERT_TRUE(runs[1].outcome.has_value()) << runs[1].error;
  const ProgressReport slow = progress0.Snapshot();
  const ProgressReport fast = progress1.Snapshot();
  std::map<std::string, double> s(slow.phase_ms.begin(), slow.phase_ms.end());
  std::map<std::string, double> f(fast.phase_ms.begin(), fast.phase_ms.end());
  std::cout << "FIGURE slow_rank_forward_ms=" << s["forward"]
            << " peer_forward_ms=" << f["forward"]
            << " slow_rank_collective_ms=" << s["collective"]
            << " peer_collective_ms=" << f["collective"] << std::endl;
  // At least half of the 150 ms each way: the ranks' own compute varies by
  // tens of milliseconds on a loaded machine.
  EXPECT_GE(s["forward"], f["forward"] + 75);
  EXPECT_GE(f["collective"], s["collective"] + 75);
}

}  // namespace
}  // namespace tessera::trainer
