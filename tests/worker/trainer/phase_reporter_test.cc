// The phase a training loop reports (run/phase_reporter.h): every phase
// change reaches the progress tracker, and a CUDA rank's reads of device
// values show as "device" before the interrupted phase resumes.
#include "worker/trainer/run/phase_reporter.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/rank_phase.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {
namespace {

TEST(PhaseReporterTest, ReportsEachPhaseToTheTracker) {
  FakeClock clock;
  ProgressTracker progress(clock);
  PhaseReporter phases(&progress);
  EXPECT_EQ(phases.phase(), RankPhase::kStartup);
  phases.Report(RankPhase::kData);
  EXPECT_EQ(phases.phase(), RankPhase::kData);
  EXPECT_EQ(progress.phase(), RankPhase::kData);
  EXPECT_EQ(phases.progress(), &progress);
}

TEST(PhaseReporterTest, ACpuRanksReadsAreNotReported) {
  FakeClock clock;
  ProgressTracker progress(clock);
  PhaseReporter phases(&progress);
  phases.Report(RankPhase::kForward);
  const int value = phases.ReadFromDevice([&] {
    EXPECT_EQ(progress.phase(), RankPhase::kForward);
    return 7;
  });
  EXPECT_EQ(value, 7);
  EXPECT_EQ(progress.phase(), RankPhase::kForward);
}

TEST(PhaseReporterTest, ADeviceReadIsReportedThenTheInterruptedPhaseResumes) {
  FakeClock clock;
  ProgressTracker progress(clock);
  PhaseReporter phases(&progress);
  phases.set_device_waits(true);
  phases.Report(RankPhase::kOptimizer);
  const double value = phases.ReadFromDevice([&] {
    EXPECT_EQ(progress.phase(), RankPhase::kDevice);
    EXPECT_EQ(phases.phase(), RankPhase::kDevice);
    return 2.5;
  });
  EXPECT_EQ(value, 2.5);
  EXPECT_EQ(phases.phase(), RankPhase::kOptimizer);
  EXPECT_EQ(progress.phase(), RankPhase::kOptimizer);
}

TEST(PhaseReporterTest, CountsItemsOfTheCurrentPhase) {
  FakeClock clock;
  ProgressTracker progress(clock);
  PhaseReporter phases(&progress);
  phases.Report(RankPhase::kEval);
  phases.AddPhaseItem();
  phases.AddPhaseItem();
  EXPECT_EQ(progress.Snapshot().phase_items, 2);
}

TEST(PhaseReporterTest, WithoutATrackerItStillFollowsThePhase) {
  PhaseReporter phases(nullptr);
  phases.set_device_waits(true);
  phases.Report(RankPhase::kCheckpoint);
  phases.AddPhaseItem();
  EXPECT_EQ(phases.ReadFromDevice([&] { return phases.phase(); }), RankPhase::kDevice);
  EXPECT_EQ(phases.phase(), RankPhase::kCheckpoint);
  EXPECT_EQ(phases.progress(), nullptr);
}

}  // namespace
}  // namespace tessera::trainer
