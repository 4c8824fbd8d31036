// RankWatch: unresponsive ranks, stalled attempts with the culprit named,
// and stragglers flagged once per episode, from progress reports and times.
#include "coordinator/core/rank_watch.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

v1::RankProgress At(int64_t step, const std::string& phase,
                    const std::string& collective = "") {
  v1::RankProgress p;
  p.set_step(step);
  p.set_phase(phase);
  p.set_collective(collective);
  p.set_step_time_ms(100);
  return p;
}

// A report covering `steps` steps with these per-step phase times.
v1::RankProgress Work(int64_t step, double forward_ms, double backward_ms,
                      double collective_ms, int steps = 10) {
  v1::RankProgress p = At(step, "forward");
  (*p.mutable_phase_ms())["data"] = 5;
  (*p.mutable_phase_ms())["forward"] = forward_ms;
  (*p.mutable_phase_ms())["backward"] = backward_ms;
  (*p.mutable_phase_ms())["collective"] = collective_ms;
  p.set_window_steps(steps);
  return p;
}

// A GPU rank's report: its host blocked on its device ("device") while the
// device waits in `collective`, whose inputs are complete when `ready`.
v1::RankProgress OnDevice(int64_t step, const std::string& collective, bool ready) {
  v1::RankProgress p = At(step, "device", collective);
  p.set_collective_ready(ready);
  return p;
}

// A GPU rank's report over 10 steps: its host waits on the device or on its
// peers most of each step, alike on every rank, while the device's own
// timeline has `forward_ms` and `backward_ms` of work.
v1::RankProgress GpuWork(int64_t step, double forward_ms, double backward_ms,
                         bool with_device_times = true) {
  v1::RankProgress p = At(step, "device", "allreduce #9 (bucket 0)");
  (*p.mutable_phase_ms())["data"] = 2;
  (*p.mutable_phase_ms())["forward"] = 3;
  (*p.mutable_phase_ms())["backward"] = 4;
  (*p.mutable_phase_ms())["device"] = 190;
  (*p.mutable_phase_ms())["collective"] = 40;
  (*p.mutable_phase_ms())["optimizer"] = 1;
  p.set_window_steps(10);
  if (with_device_times) {
    (*p.mutable_device_phase_ms())["data"] = 1;
    (*p.mutable_device_phase_ms())["forward"] = forward_ms;
    (*p.mutable_device_phase_ms())["backward"] = backward_ms;
    (*p.mutable_device_phase_ms())["comm"] = 20;
    (*p.mutable_device_phase_ms())["optimizer"] = 10;
    p.set_device_window_steps(10);
  }
  return p;
}

RankWatchOptions Options() {
  RankWatchOptions o;
  o.rank_silent_after = absl::Seconds(20);
  o.stall_after_min = absl::Seconds(60);
  o.stall_step_factor = 10;
  o.straggler_ratio = 1.3;
  o.straggler_window = absl::Seconds(30);
  return o;
}

const std::vector<bool> kBoth = {true, true};

TEST(RankWatchTest, RankThatStopsReportingIsNamedUnresponsiveWithItsPeersWait) {
  RankWatch watch({"w1", "w2"}, kStart);
  for (int s = 0; s < 10; ++s) {
    const absl::Time t = kStart + absl::Seconds(2 * s);
    watch.Report(0, At(s, "forward"), t);
    watch.Report(1, At(s, "forward"), t);
  }
  // Rank 1 goes silent at t=18 s (SIGSTOP); rank 0 blocks on the allreduce.
  for (int s = 10; s < 30; ++s) {
    const absl::Time t = kStart + absl::Seconds(2 * s);
    watch.Report(0, At(10, "collective", "allreduce #31 (bucket 2)"), t);
  }
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(38), Options(), kBoth).has_value());
  auto verdict = watch.Check(kStart + absl::Seconds(39), Options(), kBoth);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->kind, WatchVerdict::Kind::kUnresponsive);
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 1 on w2 unresponsive: no progress report "
                                         "for 21 s (last at step 9 in forward)"));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 0 waiting on allreduce #31 (bucket 2)"));
}

TEST(RankWatchTest, SilenceCountsFromTheStartBeforeAnyReport) {
  RankWatch watch({"w1", "w2"}, kStart);
  watch.Report(0, At(0, "forward"), kStart + absl::Seconds(15));
  auto verdict = watch.Check(kStart + absl::Seconds(21), Options(), kBoth);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason, HasSubstr("none since the attempt started"));
}

TEST(RankWatchTest, ExitedRanksAreNotJudged) {
  RankWatch watch({"w1", "w2"}, kStart);
  watch.Report(0, At(5, "done"), kStart);
  watch.Report(1, At(5, "eval"), kStart + absl::Seconds(25));
  EXPECT_FALSE(
      watch.Check(kStart + absl::Seconds(26), Options(), {false, true}).has_value());
}

// Finished ranks waiting to get their metrics and result stored (a full
// disk) keep reporting "done" at the last step: that is never a stall.
TEST(RankWatchTest, StallRuleIgnoresRanksInDone) {
  RankWatch watch({"w1", "w2"}, kStart);
  for (int i = 0; i <= 120; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, At(468, "done"), t);
    watch.Report(1, At(468, "done"), t);
  }
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(241), Options(), kBoth).has_value());

  // A peer still training that stops moving is judged as before, and the
  // finished rank is not among the culprits.
  RankWatch mixed({"w1", "w2"}, kStart);
  for (int i = 0; i <= 40; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    mixed.Report(0, At(468, "done"), t);
    mixed.Report(1, At(400, "data"), t);
  }
  auto verdict = mixed.Check(kStart + absl::Seconds(81), Options(), kBoth);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason, Not(HasSubstr("rank 0")));
}

TEST(RankWatchTest, RankStuckOutsideACollectiveWhilePeersWaitIsTheStallCulprit) {
  RankWatch watch({"w1", "w2", "w3"}, kStart);
  // Step 412: rank 1 hangs in data wait, the others wait on the allreduce;
  // every rank keeps reporting (its lease thread runs).
  for (int i = 0; i <= 30; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, At(412, "collective", "allreduce #830 (bucket 3)"), t);
    watch.Report(1, At(412, "data"), t);
    watch.Report(2, At(412, "collective", "allreduce #830 (bucket 3)"), t);
  }
  const std::vector<bool> all = {true, true, true};
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(60), Options(), all).has_value());
  auto verdict = watch.Check(kStart + absl::Seconds(61), Options(), all);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->kind, WatchVerdict::Kind::kStalled);
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 1 on w2 stalled at step 412 in data"));
  EXPECT_THAT(verdict->reason,
              HasSubstr("ranks 0,2 waiting on allreduce #830 (bucket 3) for"));
}

TEST(RankWatchTest, GpuRankWhoseOwnDeviceWorkHangsIsTheStallCulprit) {
  RankWatch watch({"w1", "w2", "w3"}, kStart);
  // Step 412 on GPUs: every host blocks on its device. Rank 1's backward
  // kernel hangs, so the inputs of its bucket all-reduce never become ready;
  // ranks 0 and 2 have theirs ready and their devices wait in the all-reduce.
  // All are at the same step: the lowest-step rule alone names all three.
  for (int i = 0; i <= 30; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, OnDevice(412, "allreduce #825 (bucket 0)", /*ready=*/true), t);
    watch.Report(1, OnDevice(412, "allreduce #825 (bucket 0)", /*ready=*/false), t);
    watch.Report(2, OnDevice(412, "allreduce #825 (bucket 0)", /*ready=*/true), t);
  }
  const std::vector<bool> all = {true, true, true};
  auto verdict = watch.Check(kStart + absl::Seconds(61), Options(), all);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->kind, WatchVerdict::Kind::kStalled);
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason,
              HasSubstr("rank 1 on w2 stalled at step 412 in device (its inputs to "
                        "allreduce #825 (bucket 0) not ready)"));
  EXPECT_THAT(verdict->reason,
              HasSubstr("ranks 0,2 waiting on allreduce #825 (bucket 0) for"));
}

TEST(RankWatchTest, GpuRankOnItsDeviceWithoutACollectiveIsWorking) {
  RankWatch watch({"w1", "w2"}, kStart);
  // Rank 0's device runs a step that never ends (no collective issued yet);
  // rank 1 waits in the all-reduce that rank 0 has not reached.
  for (int i = 0; i <= 30; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, OnDevice(412, "", /*ready=*/false), t);
    watch.Report(1, OnDevice(412, "allreduce #825 (bucket 0)", /*ready=*/true), t);
  }
  auto verdict = watch.Check(kStart + absl::Seconds(61), Options(), kBoth);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_THAT(verdict->culprits, ElementsAre(0));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 0 on w1 stalled at step 412 in device"));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 1 waiting on allreduce #825 (bucket 0)"));
}

TEST(RankWatchTest, InputsBecomingReadyCountAsProgress) {
  RankWatch watch({"w1"}, kStart);
  // A long backward on the device: the all-reduce's inputs turn ready at 50 s.
  for (int i = 0; i <= 40; ++i) {
    watch.Report(0, OnDevice(412, "allreduce #825 (bucket 0)", /*ready=*/i >= 25),
                 kStart + absl::Seconds(2 * i));
  }
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(80), Options(), {true}).has_value());
}

TEST(RankWatchTest, StallThresholdGrowsWithTheMedianStepTime) {
  RankWatch watch({"w1", "w2"}, kStart);
  v1::RankProgress slow = At(3, "forward");
  slow.set_step_time_ms(9000);  // 10 x 9 s = 90 s > the 60 s floor
  watch.Report(0, slow, kStart);
  watch.Report(1, slow, kStart);
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(19), Options(), kBoth).has_value());
  watch.Report(0, slow, kStart + absl::Seconds(80));
  watch.Report(1, slow, kStart + absl::Seconds(80));
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(85), Options(), kBoth).has_value());
  watch.Report(0, slow, kStart + absl::Seconds(90));
  watch.Report(1, slow, kStart + absl::Seconds(90));
  EXPECT_TRUE(watch.Check(kStart + absl::Seconds(91), Options(), kBoth).has_value());
}

TEST(RankWatchTest, AnyRankMovingKeepsTheAttemptAlive) {
  RankWatch watch({"w1", "w2"}, kStart);
  // Rank 1 keeps reporting (it is not silent) but is frozen at one (step,
  // phase, items) for 200 s, past the 60 s stall threshold; rank 0 moves.
  for (int i = 0; i < 100; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, At(i, i % 2 == 0 ? "forward" : "backward"), t);
    watch.Report(1, At(7, "eval"), t);
    EXPECT_FALSE(watch.Check(t, Options(), kBoth).has_value()) << i;
  }
  // The same frozen rank with its peer frozen too is a stall: the check above
  // passed because rank 0 moved, not because nothing is ever flagged.
  RankWatch both_frozen({"w1", "w2"}, kStart);
  for (int i = 0; i < 100; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    both_frozen.Report(0, At(8, "forward"), t);
    both_frozen.Report(1, At(7, "eval"), t);
  }
  EXPECT_TRUE(
      both_frozen.Check(kStart + absl::Seconds(198), Options(), kBoth).has_value());
}

TEST(RankWatchTest, EvalBatchesCountAsProgress) {
  RankWatch watch({"w1"}, kStart);
  for (int i = 0; i < 60; ++i) {
    v1::RankProgress p = At(50, "eval");
    p.set_phase_items(i);
    watch.Report(0, p, kStart + absl::Seconds(2 * i));
  }
  EXPECT_FALSE(watch.Check(kStart + absl::Seconds(120), Options(), {true}).has_value());
}

TEST(RankWatchTest, EveryoneWaitingNamesTheRankThatFellBehind) {
  RankWatch watch({"w1", "w2"}, kStart);
  for (int i = 0; i <= 31; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    watch.Report(0, At(100, "collective", "allreduce #201"), t);
    watch.Report(1, At(99, "collective", "allreduce #199"), t);
  }
  auto verdict = watch.Check(kStart + absl::Seconds(62), Options(), kBoth);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_THAT(verdict->culprits, ElementsAre(1));
  EXPECT_THAT(verdict->reason,
              HasSubstr("rank 1 on w2 stalled at step 99 in collective allreduce #199"));
  EXPECT_THAT(verdict->reason, HasSubstr("rank 0 waiting on allreduce #201"));
}

TEST(RankWatchTest, DisabledWatchdogNeverEndsAnAttempt) {
  RankWatch watch({"w1", "w2"}, kStart);
  RankWatchOptions off = Options();
  off.enabled = false;
  EXPECT_FALSE(watch.Check(kStart + absl::Hours(1), off, kBoth).has_value());
}

TEST(RankWatchTest, SpecOverridesOnlyTheFieldsItSets) {
  v1::WatchdogSpec spec;
  spec.set_rank_silent_after_s(3);
  spec.set_stall_after_min_s(10);
  const RankWatchOptions o = RankWatchFor(Options(), spec);
  EXPECT_TRUE(o.enabled);
  EXPECT_EQ(o.rank_silent_after, absl::Seconds(3));
  EXPECT_EQ(o.stall_after_min, absl::Seconds(10));
  EXPECT_EQ(o.straggler_ratio, 1.3);
  spec.set_enabled(false);
  EXPECT_FALSE(RankWatchFor(Options(), spec).enabled);
}

TEST(RankWatchTest, SlowRankIsFlaggedOnceAfterTheWindowAndNamesTheSlowPhase) {
  RankWatch watch({"w1", "w2"}, kStart);
  std::vector<std::string> events;
  for (int i = 0; i <= 30; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    // Rank 1 spends 150 ms more in forward; rank 0 waits for it.
    watch.Report(0, Work(i, 50, 100, 160), t);
    watch.Report(1, Work(i, 190, 100, 10), t);
    for (const std::string& e : watch.UpdateStragglers(t, Options(), kBoth)) {
      events.push_back(e);
    }
    if (i * 2 < 30) EXPECT_THAT(watch.Stragglers(), IsEmpty()) << i;
  }
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_THAT(events[0], HasSubstr("rank 1 on w2: 1.9x the median step work"));
  EXPECT_THAT(events[0], HasSubstr("forward 190 ms vs 50 ms per step"));
  EXPECT_TRUE(watch.IsStraggler(1));
  EXPECT_FALSE(watch.IsStraggler(0));
  EXPECT_THAT(watch.Stragglers(), SizeIs(1));
}

TEST(RankWatchTest, SlowGpuIsFlaggedFromItsDeviceTimes) {
  // Rank 1's GPU takes 1.6x its peers' time in forward and backward. Its
  // host, like theirs, spends the step waiting on the device or the
  // all-reduce, so the host times of all three look alike.
  const std::vector<bool> all = {true, true, true};
  auto run = [&](bool with_device_times) {
    RankWatch watch({"w1", "w2", "w3"}, kStart);
    std::vector<std::string> events;
    for (int i = 0; i <= 30; ++i) {
      const absl::Time t = kStart + absl::Seconds(2 * i);
      watch.Report(0, GpuWork(i, 50, 100, with_device_times), t);
      watch.Report(1, GpuWork(i, 80, 160, with_device_times), t);
      watch.Report(2, GpuWork(i, 50, 100, with_device_times), t);
      for (const std::string& e : watch.UpdateStragglers(t, Options(), all)) {
        events.push_back(e);
      }
      if (i * 2 < 30) EXPECT_THAT(watch.Stragglers(), IsEmpty()) << i;
    }
    return events;
  };
  const std::vector<std::string> events = run(/*with_device_times=*/true);
  ASSERT_THAT(events, SizeIs(1));
  // Own work on the device: data + forward + backward + optimizer, without
  // comm: 251 ms vs 161 ms.
  EXPECT_THAT(events[0], HasSubstr("rank 1 on w2: 1.6x the median step work"));
  EXPECT_THAT(events[0], HasSubstr("backward 160 ms vs 100 ms per step on the device"));
  // The host times alone cannot tell the slow GPU from its peers.
  EXPECT_THAT(run(/*with_device_times=*/false), IsEmpty());
}

TEST(RankWatchTest, DeviceTimesAreComparedOnlyWhenEveryRankHasThem) {
  RankWatch watch({"w1", "w2", "w3"}, kStart);
  const std::vector<bool> all = {true, true, true};
  int flagged = 0;
  for (int i = 0; i <= 30; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    // Rank 0 reports host times only (an older trainer): the device times of
    // ranks 1 and 2 must not be weighed against its host times.
    watch.Report(0, GpuWork(i, 50, 100, /*with_device_times=*/false), t);
    watch.Report(1, GpuWork(i, 80, 160), t);
    watch.Report(2, GpuWork(i, 50, 100), t);
    flagged += watch.UpdateStragglers(t, Options(), all).size();
  }
  EXPECT_EQ(flagged, 0);
}

TEST(RankWatchTest, StragglerEpisodeEndsWhenTheRankCatchesUpAndANewOneIsReported) {
  RankWatch watch({"w1", "w2"}, kStart);
  int flagged = 0;
  absl::Time t = kStart;
  auto run = [&](double slow_forward, int seconds) {
    for (int i = 0; i < seconds; i += 2, t += absl::Seconds(2)) {
      watch.Report(0, Work(1, 50, 100, 50), t);
      watch.Report(1, Work(1, slow_forward, 100, 10), t);
      flagged += watch.UpdateStragglers(t, Options(), kBoth).size();
    }
  };
  run(200, 40);
  EXPECT_EQ(flagged, 1);
  run(60, 10);  // caught up for a moment: still the same episode
  EXPECT_TRUE(watch.IsStraggler(1));
  run(200, 40);
  EXPECT_EQ(flagged, 1) << "a moment of catching up started a second episode";
  run(60, 40);  // caught up for a whole window: episode over
  EXPECT_FALSE(watch.IsStraggler(1));
  run(200, 20);  // slow again, but not yet for the window
  EXPECT_EQ(flagged, 1);
  run(200, 20);
  EXPECT_EQ(flagged, 2);
}

TEST(RankWatchTest, BriefSlownessAndShortWindowsAreNotFlagged) {
  RankWatch watch({"w1", "w2"}, kStart);
  int flagged = 0;
  for (int i = 0; i < 40; ++i) {
    const absl::Time t = kStart + absl::Seconds(2 * i);
    const bool slow = i % 10 < 5;  // 10 s slow, 10 s not: never 30 s in a row
    watch.Report(0, Work(i, 50, 100, 50), t);
    watch.Report(1, Work(i, slow ? 200 : 55, 100, 10, /*steps=*/i < 5 ? 2 : 10), t);
    flagged += watch.UpdateStragglers(t, Options(), kBoth).size();
  }
  EXPECT_EQ(flagged, 0);
}

}  // namespace
}  // namespace tessera
