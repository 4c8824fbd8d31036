// The --fault test hook: its grammar (common/fault_spec.h), with a clear error
// for every kind of bad input, and the injector that makes the chosen rank
// hang at step N in a phase or sleep extra in a phase every step.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/fault_spec.h"
#include "common/rank_phase.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/run/fault_injector.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

TEST(FaultSpecTest, EmptyTextIsNoFault) {
  const absl::StatusOr<FaultSpec> spec = ParseFaultSpec("");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->enabled());
  EXPECT_EQ(FormatFaultSpec(*spec), "");
}

TEST(FaultSpecTest, ParsesAHang) {
  const absl::StatusOr<FaultSpec> spec =
      ParseFaultSpec("hang:rank=1,step=412,phase=data");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, FaultSpec::Kind::kHang);
  EXPECT_EQ(spec->rank, 1);
  EXPECT_EQ(spec->step, 412);
  EXPECT_EQ(spec->phase, RankPhase::kData);
  EXPECT_FALSE(spec->attempt.has_value());
}

TEST(FaultSpecTest, ParsesASlowRankWithKeysInAnyOrderAndAnAttempt) {
  const absl::StatusOr<FaultSpec> spec =
      ParseFaultSpec("slow:ms=150,attempt=1,phase=forward,rank=0");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, FaultSpec::Kind::kSlow);
  EXPECT_EQ(spec->rank, 0);
  EXPECT_EQ(spec->ms, 150);
  EXPECT_EQ(spec->phase, RankPhase::kForward);
  EXPECT_EQ(spec->attempt, 1);
  EXPECT_EQ(FormatFaultSpec(*spec), "slow:rank=0,phase=forward,ms=150,attempt=1");
}

TEST(FaultSpecTest, FormattedSpecsParseBackToThemselves) {
  for (const std::string text :
       {"hang:rank=3,step=0,phase=checkpoint", "hang:rank=0,step=9,phase=eval,attempt=2",
        "slow:rank=1,phase=collective,ms=600000"}) {
    const absl::StatusOr<FaultSpec> spec = ParseFaultSpec(text);
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(FormatFaultSpec(*spec), text);
  }
}

TEST(FaultSpecTest, RejectsBadInputWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hang", "no kind"},
      {"crash:rank=0", "unknown kind 'crash'"},
      {"hang:rank=0,phase=data", "hang needs step="},
      {"hang:step=3,phase=data", "hang needs rank="},
      {"hang:rank=0,step=3", "hang needs phase="},
      {"slow:rank=0,phase=data", "slow needs ms="},
      {"slow:rank=0,phase=data,ms=5,step=3", "unknown key 'step' for slow"},
      {"hang:rank=0,step=3,phase=data,ms=5", "unknown key 'ms' for hang"},
      {"hang:rank=0,rank=1,step=3,phase=data", "'rank' given twice"},
      {"hang:rank=-1,step=3,phase=data", "rank must be an integer"},
      {"hang:rank=x,step=3,phase=data", "rank must be an integer"},
      {"hang:rank=0,step=3,phase=lunch", "phase must be one of data, forward"},
      {"slow:rank=0,phase=eval,ms=5",
       "phase must be one of data, forward, backward, "
       "collective, optimizer for slow"},
      {"hang:rank=0,step=3,phase=startup", "phase must be one of"},
      {"slow:rank=0,phase=data,ms=0", "ms must be an integer in [1, 600000]"},
      {"slow:rank=0,phase=data,ms=600001", "ms must be an integer in [1, 600000]"},
      {"hang:rank=0,step=3,phase=data,attempt=0", "attempt must be an integer in [1,"},
      {"hang:rank=0,,step=3,phase=data", "'' is not key=value"},
      {"hang:rank=0,step=,phase=data", "'step=' is not key=value"},
      {"hang:rank=0, step=3,phase=data", "holds a space"},
      {"hang:" + std::string(300, 'x'), "longer than 256 bytes"},
  };
  for (const auto& [text, reason] : cases) {
    const absl::StatusOr<FaultSpec> spec = ParseFaultSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr(reason)) << text;
    // Every error shows the grammar.
    EXPECT_THAT(spec.status().message(), HasSubstr("expected hang:rank=R,step=N,phase=P"))
        << text;
  }
}

TEST(FaultSpecTest, AppliesOnlyToItsRankAndAttempt) {
  FaultSpec spec = *ParseFaultSpec("hang:rank=1,step=3,phase=data");
  EXPECT_TRUE(spec.AppliesTo(1, 1));
  EXPECT_TRUE(spec.AppliesTo(1, 2));
  EXPECT_FALSE(spec.AppliesTo(0, 1));
  spec = *ParseFaultSpec("hang:rank=1,step=3,phase=data,attempt=1");
  EXPECT_TRUE(spec.AppliesTo(1, 1));
  EXPECT_FALSE(spec.AppliesTo(1, 2));
  EXPECT_FALSE(FaultSpec{}.AppliesTo(0, 0));
}

// An injector whose hang and sleep are recorded instead of blocking.
struct Recorded {
  std::vector<int64_t> hangs;  // the step passed to OnPhase when it hung
  std::vector<absl::Duration> sleeps;
  std::vector<std::string> logs;
  int64_t current_step = 0;

  FaultInjectorOptions Options() {
    FaultInjectorOptions options;
    options.hang = [this] { hangs.push_back(current_step); };
    options.sleep = [this](absl::Duration d) { sleeps.push_back(d); };
    options.log = [this](const std::string& line) { logs.push_back(line); };
    return options;
  }
};

// Drives `injector` through `steps` steps of the loop's phases.
void RunSteps(FaultInjector& injector, Recorded& recorded, int64_t steps) {
  for (int64_t done = 0; done < steps; ++done) {
    recorded.current_step = done;
    for (const RankPhase phase :
         {RankPhase::kData, RankPhase::kForward, RankPhase::kBackward,
          RankPhase::kCollective, RankPhase::kOptimizer}) {
      injector.OnPhase(phase, done);
    }
  }
}

TEST(FaultInjectorTest, HangsOnceTheRankReachesTheStepInThePhase) {
  Recorded recorded;
  FaultInjector injector(*ParseFaultSpec("hang:rank=1,step=4,phase=data"), /*rank=*/1,
                         /*attempt=*/1, recorded.Options());
  EXPECT_TRUE(injector.active());
  RunSteps(injector, recorded, 10);
  EXPECT_EQ(recorded.hangs, std::vector<int64_t>({4}));
  ASSERT_EQ(recorded.logs.size(), 1u);
  EXPECT_THAT(recorded.logs[0], HasSubstr("rank 1 hangs at step 4 in data"));
  EXPECT_THAT(recorded.logs[0], HasSubstr("--fault=hang:rank=1,step=4,phase=data"));
}

TEST(FaultInjectorTest, ARunResumedPastTheStepDoesNotHang) {
  Recorded recorded;
  FaultInjector injector(*ParseFaultSpec("hang:rank=0,step=4,phase=forward"), 0, 2,
                         recorded.Options());
  for (int64_t done = 5; done < 9; ++done) injector.OnPhase(RankPhase::kForward, done);
  EXPECT_TRUE(recorded.hangs.empty());
}

TEST(FaultInjectorTest, OtherRanksAndOtherAttemptsRunClean) {
  Recorded recorded;
  FaultInjector other_rank(*ParseFaultSpec("hang:rank=1,step=0,phase=data"), 0, 1,
                           recorded.Options());
  FaultInjector other_attempt(*ParseFaultSpec("slow:rank=1,phase=data,ms=50,attempt=1"),
                              1, 2, recorded.Options());
  EXPECT_FALSE(other_rank.active());
  EXPECT_FALSE(other_attempt.active());
  RunSteps(other_rank, recorded, 3);
  RunSteps(other_attempt, recorded, 3);
  EXPECT_TRUE(recorded.hangs.empty());
  EXPECT_TRUE(recorded.sleeps.empty());
}

TEST(FaultInjectorTest, SlowSleepsOncePerStepInItsPhase) {
  Recorded recorded;
  FaultInjector injector(*ParseFaultSpec("slow:rank=0,phase=backward,ms=120"), 0, 1,
                         recorded.Options());
  RunSteps(injector, recorded, 5);
  // Gradient accumulation enters backward several times in one step.
  injector.OnPhase(RankPhase::kBackward, 4);
  injector.OnPhase(RankPhase::kBackward, 4);
  EXPECT_EQ(recorded.sleeps, std::vector<absl::Duration>(5, absl::Milliseconds(120)));
  EXPECT_TRUE(recorded.hangs.empty());
  ASSERT_EQ(recorded.logs.size(), 1u);  // one line, not one per step
  EXPECT_THAT(recorded.logs[0], HasSubstr("rank 0 spends 120 ms more in backward"));
}

}  // namespace
}  // namespace tessera::trainer
