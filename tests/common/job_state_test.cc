#include "common/job_state.h"

#include <set>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JobStateTest, OnlySucceededFailedAndCancelledAreTerminal) {
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_UNSPECIFIED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_QUEUED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_SCHEDULED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_RUNNING));
}

TEST(JobStateTest, NameDropsThePrefixAndNumbersUnknownValues) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_EQ(JobStateName(static_cast<v1::JobState>(99)), "STATE_99");
}

TEST(JobStateTest, ParseAcceptsAnyCaseWithOrWithoutPrefix) {
  EXPECT_EQ(*ParseJobState("running"), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*ParseJobState("CANCELLED"), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(*ParseJobState("job_state_Succeeded"), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(*ParseJobState(" JOB_STATE_QUEUED "), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(ParseJobState("").ok());
  EXPECT_FALSE(ParseJobState("JOB_STATE_UNSPECIFIED").ok());
  EXPECT_FALSE(ParseJobState("run").ok());
}

TEST(JobStateTest, ParseErrorNamesTheTextOnOneLineAndTheAcceptedNames) {
  absl::StatusOr<v1::JobState> bad = ParseJobState("pau\nsed");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown job state 'pau sed'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("QUEUED, SCHEDULED, RUNNING"));
}

TEST(JobStateTest, NamesListEveryStateButUnspecifiedInEnumOrder) {
  EXPECT_THAT(JobStateNames(), ElementsAre("QUEUED", "SCHEDULED", "RUNNING", "SUCCEEDED",
                                           "FAILED", "CANCELLED"));
}

TEST(JobStateTest, TheTransitionTableAllowsExactlyTheDesignedChanges) {
  using S = v1::JobState;
  const S all[] = {v1::JOB_STATE_QUEUED,  v1::JOB_STATE_SCHEDULED,
                   v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED,
                   v1::JOB_STATE_FAILED,  v1::JOB_STATE_CANCELLED};
  // docs/design.md draws the same table.
  const std::set<std::pair<S, S>> legal = {
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED},
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_QUEUED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_QUEUED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLED},
  };
  for (S from : all) {
    for (S to : all) {
      EXPECT_EQ(IsLegalTransition(from, to), legal.contains({from, to}))
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
}

TEST(JobStateTest, AnIllegalChangeIsAnInternalErrorNamingBothStates) {
  absl::Status s = CheckTransition(v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_RUNNING);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "illegal job state change SUCCEEDED -> RUNNING");
  EXPECT_EQ(CheckTransition(v1::JOB_STATE_RUNNING, v1::JOB_STATE_SCHEDULED).message(),
            "illegal job state change RUNNING -> SCHEDULED");
  EXPECT_EQ(CheckTransition(v1::JOB_STATE_QUEUED, v1::JOB_STATE_QUEUED).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(CheckTransition(v1::JOB_STATE_RUNNING, v1::JOB_STATE_QUEUED).ok());
}

TEST(RankStateTest, NamesRoundTripAndUnknownTextIsRefused) {
  for (RankState s : {RankState::kAssigned, RankState::kRunning, RankState::kExited}) {
    absl::StatusOr<RankState> parsed = ParseRankState(RankStateName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(RankStateName(RankState::kExited), "exited");
  EXPECT_EQ(ParseRankState("EXITED").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseRankState("").ok());
}

}  // namespace
}  // namespace tessera
