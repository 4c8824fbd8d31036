// Coordinator restarts: the coordinator is killed mid-job and comes back after
// a downtime; the job's trainers run on meanwhile, and the job finishes with
// every metric step stored exactly once.
#include <cmath>
#include <map>

#include "tests/faults/fault_fixture.h"

namespace tessera::faults {
namespace {

class RestartTest : public FaultTest {
 protected:
  // Submits a 2-rank job of `steps` steps, kills the coordinator once both
  // ranks train, restarts it `downtime` later, and checks the job. Returns the
  // job's pace in steps per second (0 when it did not succeed).
  double RunThroughRestart(int downtime_s, int64_t steps) {
    constexpr int kEvery = 5;
    SCOPED_TRACE(absl::StrCat("downtime ", downtime_s, " s"));
    JobOptions job;
    job.name = absl::StrCat("restart-after-", downtime_s, "s");
    job.max_steps = steps;
    job.metrics_every = kEvery;
    absl::StatusOr<int64_t> id = Submit(job);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return 0;
    WaitForTraining(*id, 2, absl::Minutes(2));
    if (HasFatalFailure()) return 0;
    auto trainers = [&] {
      std::set<pid_t> pids;
      for (const TrainerProcess& p : FindTrainers(*net_, CoordinatorAddress())) {
        if (p.job_id == *id) pids.insert(p.pid);
      }
      return pids;
    };
    const std::set<pid_t> before = trainers();
    EXPECT_EQ(before.size(), 2u);

    KillCoordinator();
    absl::SleepFor(absl::Seconds(downtime_s));
    // The same trainer processes still run: the outage fell mid-job.
    EXPECT_EQ(trainers(), before) << "the job's trainers did not outlast the downtime\n"
                                  << DumpLogs();
    const absl::Time restarted = absl::Now();
    StartCoordinator();
    if (HasFatalFailure()) return 0;
    // Both workers heartbeat the new coordinator: their last_seen moves past
    // the value the coordinator recovered them with.
    std::map<std::string, int64_t> recovered;
    for (const v1::Worker& w : Workers()) recovered[w.name()] = w.last_seen_unix_ms();
    const bool attached = WaitUntil(
        [&] {
          int fresh = 0;
          for (const v1::Worker& w : Workers()) {
            fresh += w.last_seen_unix_ms() > recovered[w.name()] ? 1 : 0;
          }
          return fresh == 2;
        },
        absl::Seconds(60), absl::Milliseconds(50));
    EXPECT_TRUE(attached) << "workers did not come back\n" << DumpLogs();
    const double reattach_ms = absl::ToDoubleMilliseconds(absl::Now() - restarted);

    v1::Job done = WaitForEnd(*id, absl::Minutes(8));
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.reason() << "\n"
                                                     << DumpLogs();
    EXPECT_EQ(done.attempt(), 1) << "the job was restarted";

    // Every multiple of metrics_every up to the last step, once per rank.
    std::map<int32_t, std::map<int64_t, int>> seen;
    for (const v1::MetricPoint& p : Points(*id, "loss")) ++seen[p.rank()][p.step()];
    int lost = 0, duplicated = 0, unexpected = 0;
    for (int32_t rank = 0; rank < 2; ++rank) {
      for (int64_t s = kEvery; s <= steps; s += kEvery) {
        const int n = seen[rank].contains(s) ? seen[rank][s] : 0;
        lost += n == 0 ? 1 : 0;
        duplicated += n > 1 ? n - 1 : 0;
      }
      for (const auto& [step, n] : seen[rank]) {
        unexpected += (step % kEvery != 0 || step > steps) ? n : 0;
      }
    }
    EXPECT_EQ(lost, 0) << "metric steps lost";
    EXPECT_EQ(duplicated, 0) << "metric steps stored twice";
    EXPECT_EQ(unexpected, 0) << "metric steps that were never reported";

    const std::string key = absl::StrCat("downtime", downtime_s, "s_");
    Figure(key + "steps", steps);
    Figure(key + "succeeded", done.state() == v1::JOB_STATE_SUCCEEDED ? 1 : 0);
    Figure(key + "reattach_ms", reattach_ms);
    Figure(key + "steps_lost", lost);
    Figure(key + "steps_duplicated", duplicated);
    // Pace from RUNNING to the end, downtime included: an underestimate, so
    // jobs sized from it run longer than planned, never shorter.
    int64_t running_ms = 0;
    for (const v1::JobEvent& e : done.events()) {
      if (e.to_state() == v1::JOB_STATE_RUNNING && running_ms == 0)
        running_ms = e.unix_ms();
    }
    const int64_t took_ms = done.updated_unix_ms() - running_ms;
    return done.state() == v1::JOB_STATE_SUCCEEDED && took_ms > 0
               ? static_cast<double>(steps) * 1000.0 / static_cast<double>(took_ms)
               : 0;
  }
};

// One job per downtime in TESSERA_FAULT_DOWNTIMES (seconds; default "0"),
// with the coordinator's default worker thresholds (suspect 3 s, dead 15 s).
// The first job's pace sizes the later ones so that each still trains when the
// coordinator comes back.
TEST_F(RestartTest, CoordinatorRestartedAfterDowntimeLosesNoMetricStep) {
  suspect_ms_ = 3000;
  dead_ms_ = 15000;
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/1));
  double steps_per_second = 0;
  for (int downtime : EnvIntList("TESSERA_FAULT_DOWNTIMES", {0})) {
    // About 30 s of training past the downtime. Before a pace is measured
    // (the first downtime) assume 25 steps/s, faster than this job runs on
    // two cores, so that the job still trains when the coordinator is back.
    int64_t steps = 250;
    if (steps_per_second > 0) {
      steps = std::max<int64_t>(
          steps,
          static_cast<int64_t>(std::ceil(steps_per_second * (downtime + 30) / 5)) * 5);
    } else if (downtime > 0) {
      steps = (25 * (downtime + 30) + 4) / 5 * 5;
    }
    const double pace = RunThroughRestart(downtime, steps);
    if (HasFatalFailure()) return;
    if (steps_per_second == 0) steps_per_second = pace;
  }
}

// A 20 s outage with the default thresholds: the restarted coordinator gives
// workers 15 s to come back, and they must (wait_for_ready, 3 s backoff cap).
TEST_F(RestartTest, CoordinatorRestartedAfter20sOutageKeepsItsWorkers) {
  suspect_ms_ = 3000;
  dead_ms_ = 15000;
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/1));
  RunThroughRestart(/*downtime_s=*/20, /*steps=*/1000);
}

}  // namespace
}  // namespace tessera::faults
