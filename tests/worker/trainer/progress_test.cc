// The progress a rank reports with its lease renewals: step counting across a
// resume, the current phase and its age, the collective it waits on, and the
// per-phase means over a window of recent steps, on a fake clock. Also the cost
// of a phase change, which the training loop pays several times per step.
#include "worker/trainer/run/progress.h"

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/rank_phase.h"
#include "gtest/gtest.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace tessera::trainer {
namespace {

std::map<std::string, double> PhaseMs(const ProgressReport& report) {
  return {report.phase_ms.begin(), report.phase_ms.end()};
}

// One step of `ms` milliseconds per phase, in the loop's order.
void RunStep(ProgressTracker& tracker, FakeClock& clock, int64_t completed,
             const std::vector<std::pair<RankPhase, int>>& phases) {
  tracker.BeginStep();
  for (const auto& [phase, ms] : phases) {
    tracker.Enter(phase);
    clock.Advance(absl::Milliseconds(ms));
  }
  tracker.EndStep(completed);
}

TEST(ProgressTrackerTest, StartsInStartupAtStepZeroWithNoStepTime) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  clock.Advance(absl::Milliseconds(1500));
  const ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.step, 0);
  EXPECT_EQ(report.phase, "startup");
  EXPECT_EQ(report.phase_elapsed_ms, 1500);
  EXPECT_EQ(report.step_time_ms, 0);
  EXPECT_EQ(report.window_steps, 0);
  EXPECT_TRUE(report.phase_ms.empty());
  EXPECT_TRUE(report.collective.empty());
}

TEST(ProgressTrackerTest, CountsStepsOnFromAResumedCheckpoint) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  tracker.SetStep(400);
  EXPECT_EQ(tracker.Snapshot().step, 400);
  RunStep(tracker, clock, 401, {{RankPhase::kData, 1}});
  EXPECT_EQ(tracker.Snapshot().step, 401);
}

TEST(ProgressTrackerTest, EvalBatchesAreCountedAndTheCountRestartsWithThePhase) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  tracker.Enter(RankPhase::kEval);
  tracker.AddPhaseItem();
  tracker.AddPhaseItem();
  EXPECT_EQ(tracker.Snapshot().phase_items, 2);
  tracker.Enter(RankPhase::kEval);  // the same phase: the count goes on
  EXPECT_EQ(tracker.Snapshot().phase_items, 2);
  tracker.Enter(RankPhase::kCollective);
  EXPECT_EQ(tracker.Snapshot().phase_items, 0);
}

TEST(ProgressTrackerTest, PhaseElapsedCountsFromEntryAndReenteringKeepsIt) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  tracker.BeginStep();
  tracker.Enter(RankPhase::kData);
  clock.Advance(absl::Seconds(2));
  tracker.Enter(RankPhase::kData);  // no change: still the same wait
  clock.Advance(absl::Seconds(3));
  ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.phase, "data");
  EXPECT_EQ(report.phase_elapsed_ms, 5000);
  tracker.Enter(RankPhase::kForward);
  clock.Advance(absl::Milliseconds(250));
  report = tracker.Snapshot();
  EXPECT_EQ(report.phase, "forward");
  EXPECT_EQ(report.phase_elapsed_ms, 250);
}

TEST(ProgressTrackerTest, MeansPerPhaseAddUpToTheStepTime) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  for (int64_t s = 1; s <= 4; ++s) {
    RunStep(tracker, clock, s,
            {{RankPhase::kData, 5},
             {RankPhase::kForward, 20},
             {RankPhase::kBackward, 40},
             {RankPhase::kCollective, 10 * static_cast<int>(s)},  // 10, 20, 30, 40
             {RankPhase::kOptimizer, 5}});
  }
  const ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.window_steps, 4);
  const std::map<std::string, double> ms = PhaseMs(report);
  EXPECT_DOUBLE_EQ(ms.at("data"), 5);
  EXPECT_DOUBLE_EQ(ms.at("forward"), 20);
  EXPECT_DOUBLE_EQ(ms.at("backward"), 40);
  EXPECT_DOUBLE_EQ(ms.at("collective"), 25);
  EXPECT_DOUBLE_EQ(ms.at("optimizer"), 5);
  EXPECT_EQ(ms.count("eval"), 0u);  // phases without time are left out
  EXPECT_DOUBLE_EQ(report.step_time_ms, 95);
  // In RankPhase order.
  ASSERT_EQ(report.phase_ms.size(), 5u);
  EXPECT_EQ(report.phase_ms.front().first, "data");
  EXPECT_EQ(report.phase_ms.back().first, "optimizer");
}

TEST(ProgressTrackerTest, WindowForgetsStepsOlderThanItsLength) {
  FakeClock clock;
  ProgressTrackerOptions options;
  options.window_steps = 3;
  ProgressTracker tracker(clock, options);
  // Three slow steps, then three fast ones: only the fast ones are left.
  for (int64_t s = 1; s <= 3; ++s) {
    RunStep(tracker, clock, s, {{RankPhase::kForward, 100}});
  }
  EXPECT_DOUBLE_EQ(tracker.Snapshot().step_time_ms, 100);
  for (int64_t s = 4; s <= 6; ++s) {
    RunStep(tracker, clock, s, {{RankPhase::kForward, 10}, {RankPhase::kData, 2}});
  }
  const ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.window_steps, 3);
  EXPECT_DOUBLE_EQ(report.step_time_ms, 12);
  EXPECT_DOUBLE_EQ(PhaseMs(report).at("forward"), 10);
  EXPECT_DOUBLE_EQ(PhaseMs(report).at("data"), 2);
}

TEST(ProgressTrackerTest, TimeOutsideStepsBelongsToNoStep) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  clock.Advance(absl::Seconds(30));  // start-up
  RunStep(tracker, clock, 1, {{RankPhase::kForward, 10}});
  // Evaluation and a checkpoint after the step, with their collectives.
  tracker.Enter(RankPhase::kEval);
  clock.Advance(absl::Seconds(4));
  tracker.Enter(RankPhase::kCollective);
  clock.Advance(absl::Seconds(1));
  tracker.Enter(RankPhase::kCheckpoint);
  clock.Advance(absl::Seconds(2));
  const ProgressReport during = tracker.Snapshot();
  EXPECT_EQ(during.phase, "checkpoint");
  EXPECT_EQ(during.phase_elapsed_ms, 2000);
  RunStep(tracker, clock, 2, {{RankPhase::kForward, 10}});
  const ProgressReport report = tracker.Snapshot();
  EXPECT_DOUBLE_EQ(report.step_time_ms, 10);
  EXPECT_EQ(PhaseMs(report).count("eval"), 0u);
  EXPECT_EQ(PhaseMs(report).count("collective"), 0u);
  EXPECT_EQ(PhaseMs(report).count("checkpoint"), 0u);
}

TEST(ProgressTrackerTest, WaitingOnPeersIsCollectiveTimeNotBackward) {
  // A rank whose backward is slow and its peer, which finishes backward fast
  // and then waits in the bucket all-reduce for the slow one.
  FakeClock clock;
  ProgressTracker slow(clock);
  ProgressTracker peer(clock);
  for (int64_t s = 1; s <= 5; ++s) {
    RunStep(slow, clock, s, {{RankPhase::kBackward, 90}, {RankPhase::kCollective, 2}});
    RunStep(peer, clock, s, {{RankPhase::kBackward, 30}, {RankPhase::kCollective, 62}});
  }
  const std::map<std::string, double> s = PhaseMs(slow.Snapshot());
  const std::map<std::string, double> p = PhaseMs(peer.Snapshot());
  EXPECT_DOUBLE_EQ(slow.Snapshot().step_time_ms, peer.Snapshot().step_time_ms);
  EXPECT_GT(s.at("backward"), 2 * p.at("backward"));
  EXPECT_GT(p.at("collective"), 10 * s.at("collective"));
}

TEST(ProgressTrackerTest, NamesTheOldestPendingCollectiveWhileWaiting) {
  FakeClock clock;
  PendingCollectiveTracker collectives(clock);
  ProgressTracker tracker(clock);
  tracker.SetCollectives(&collectives);
  for (int i = 0; i < 411; ++i) collectives.End(collectives.Begin("allreduce", 0));
  collectives.Begin("allreduce", 3);  // #412
  collectives.Begin("allreduce", 4);  // #413
  tracker.BeginStep();
  tracker.Enter(RankPhase::kBackward);
  // Bucket all-reduces run during backward, but the rank does not wait yet.
  EXPECT_EQ(tracker.Snapshot().collective, "");
  tracker.Enter(RankPhase::kCollective);
  clock.Advance(absl::Seconds(64));
  const ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.phase, "collective");
  EXPECT_EQ(report.collective, "allreduce #412 (bucket 3)");
  EXPECT_EQ(report.phase_elapsed_ms, 64000);
  // Once the communicator is gone the tracker names nothing.
  tracker.SetCollectives(nullptr);
  EXPECT_EQ(tracker.Snapshot().collective, "");
}

TEST(ProgressTrackerTest, WaitingOnTheDeviceNamesTheCollectiveAndWhetherItIsReady) {
  FakeClock clock;
  PendingCollectiveTracker collectives(clock);
  ProgressTracker tracker(clock);
  tracker.SetCollectives(&collectives);
  // A device backend's all-reduce: issued while this rank's own kernels that
  // produce its inputs are still queued.
  const uint64_t bucket0 = collectives.Begin("allreduce", 0, /*ready=*/false);
  tracker.BeginStep();
  tracker.Enter(RankPhase::kDevice);  // the host reads the stop agreement
  clock.Advance(absl::Seconds(5));
  ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.phase, "device");
  EXPECT_EQ(report.collective, "allreduce #1 (bucket 0)");
  EXPECT_FALSE(report.collective_ready);
  EXPECT_EQ(report.phase_elapsed_ms, 5000);
  // Its inputs are complete: the device now waits in the all-reduce, on peers.
  collectives.MarkReady(bucket0);
  report = tracker.Snapshot();
  EXPECT_EQ(report.collective, "allreduce #1 (bucket 0)");
  EXPECT_TRUE(report.collective_ready);
  // In "collective" it is named with its readiness too; host collectives are
  // ready as they begin.
  collectives.End(bucket0);
  collectives.Begin("barrier");
  tracker.Enter(RankPhase::kCollective);
  report = tracker.Snapshot();
  EXPECT_EQ(report.collective, "barrier #2");
  EXPECT_TRUE(report.collective_ready);
  // Nothing named, nothing ready.
  tracker.Enter(RankPhase::kOptimizer);
  report = tracker.Snapshot();
  EXPECT_EQ(report.collective, "");
  EXPECT_FALSE(report.collective_ready);
}

TEST(ProgressTrackerTest, DeviceTimeCountsAsAPhaseOfTheStep) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  RunStep(
      tracker, clock, 1,
      {{RankPhase::kForward, 3}, {RankPhase::kDevice, 90}, {RankPhase::kOptimizer, 1}});
  const ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(PhaseMs(report), (std::map<std::string, double>{
                                 {"forward", 3}, {"device", 90}, {"optimizer", 1}}));
  EXPECT_DOUBLE_EQ(report.step_time_ms, 94);
}

TEST(ProgressTrackerTest, ReportsTheDeviceStepTimesLastSet) {
  FakeClock clock;
  ProgressTracker tracker(clock);
  // A CPU rank (no device timer) reports none.
  EXPECT_TRUE(tracker.Snapshot().device_phase_ms.empty());
  EXPECT_EQ(tracker.Snapshot().device_window_steps, 0);
  tracker.SetDeviceStepTimes(
      {{"data", 1}, {"forward", 61.5}, {"backward", 120}, {"comm", 8}, {"optimizer", 9}},
      10);
  RunStep(tracker, clock, 1, {{RankPhase::kDevice, 200}});
  ProgressReport report = tracker.Snapshot();
  EXPECT_EQ(report.device_window_steps, 10);
  EXPECT_EQ((std::map<std::string, double>{report.device_phase_ms.begin(),
                                           report.device_phase_ms.end()}),
            (std::map<std::string, double>{{"data", 1},
                                           {"forward", 61.5},
                                           {"backward", 120},
                                           {"comm", 8},
                                           {"optimizer", 9}}));
  // The next interval's means replace them.
  tracker.SetDeviceStepTimes({{"forward", 70}}, 5);
  report = tracker.Snapshot();
  EXPECT_EQ(report.device_window_steps, 5);
  ASSERT_EQ(report.device_phase_ms.size(), 1u);
  EXPECT_EQ(report.device_phase_ms[0].first, "forward");
  EXPECT_EQ(report.device_phase_ms[0].second, 70);
}

TEST(ProgressTrackerTest, SnapshotsFromAnotherThreadSeeConsistentReports) {
  RealClock clock;
  ProgressTracker tracker(clock);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    int64_t last = 0;
    while (!done.load()) {
      const ProgressReport report = tracker.Snapshot();
      EXPECT_GE(report.step, last);
      last = report.step;
      double sum = 0;
      for (const auto& [phase, ms] : report.phase_ms) sum += ms;
      EXPECT_NEAR(sum, report.step_time_ms, 1e-6 + 1e-9 * report.step_time_ms);
    }
  });
  for (int64_t s = 1; s <= 20000; ++s) {
    tracker.BeginStep();
    tracker.Enter(RankPhase::kData);
    tracker.Enter(RankPhase::kForward);
    tracker.Enter(RankPhase::kOptimizer);
    tracker.EndStep(s);
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(tracker.step(), 20000);
}

// The loop pays for about seven tracker calls per step (begin, five phases,
// end); a CPU step of the smallest model takes tens of milliseconds. The bound
// is far above the measured cost (tens of nanoseconds) so that a loaded
// machine does not fail it; a lock held across something slow would.
TEST(ProgressTrackerTest, PhaseChangesAreCheapEnoughForTheHotLoop) {
  RealClock clock;
  ProgressTracker tracker(clock);
  constexpr int kSteps = 100000;
  const RankPhase phases[] = {RankPhase::kData, RankPhase::kForward, RankPhase::kBackward,
                              RankPhase::kCollective, RankPhase::kOptimizer};
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 1; s <= kSteps; ++s) {
    tracker.BeginStep();
    for (const RankPhase phase : phases) tracker.Enter(phase);
    tracker.EndStep(s);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double per_call_ns = 1e9 * seconds / (kSteps * 7.0);
  const double per_step_us = 1e6 * seconds / kSteps;
  std::cout << "FIGURE progress_call_ns=" << per_call_ns << "\n"
            << "FIGURE progress_per_step_us=" << per_step_us << std::endl;
  EXPECT_LT(per_call_ns, 2000);
  EXPECT_EQ(tracker.step(), kSteps);
}

}  // namespace
}  // namespace tessera::trainer
