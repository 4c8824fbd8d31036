#include "coordinator/core/rendezvous_rounds.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Outcome {
  std::optional<absl::StatusOr<RendezvousResult>> result;
};

RendezvousRounds::Callback Capture(Outcome* out) {
  return [out](absl::StatusOr<RendezvousResult> r) { out->result = std::move(r); };
}

TEST(RendezvousRoundsTest, ReleasesAllRanksOnlyWhenTheLastJoins) {
  RendezvousRounds rdv;
  rdv.Open(/*job_id=*/7, /*attempt=*/1, {0, 0, 1});
  Outcome r0, r1, r2;
  RendezvousRounds::Releases releases;
  bool completed = false;

  ASSERT_TRUE(rdv.Join(7, 1, 2, "", "gloo", Capture(&r2), &releases, &completed).ok());
  EXPECT_FALSE(completed);
  ASSERT_TRUE(
      rdv.Join(7, 1, 0, "10.0.0.1:4000", "gloo", Capture(&r0), &releases, &completed)
          .ok());
  EXPECT_FALSE(completed);
  EXPECT_TRUE(releases.empty());
  EXPECT_EQ(rdv.Missing(7, 1), std::vector<int32_t>{1});

  ASSERT_TRUE(rdv.Join(7, 1, 1, "", "gloo", Capture(&r1), &releases, &completed).ok());
  EXPECT_TRUE(completed);
  ASSERT_EQ(releases.size(), 3u);
  for (auto& [cb, result] : releases) cb(std::move(result));

  for (auto* o : {&r0, &r1, &r2}) {
    ASSERT_TRUE(o->result.has_value());
    ASSERT_TRUE(o->result->ok());
    EXPECT_EQ((*o->result)->bootstrap, "10.0.0.1:4000");
    EXPECT_EQ((*o->result)->world_size, 3);
    EXPECT_EQ((*o->result)->attempt, 1);
  }
  EXPECT_EQ((*r1.result)->rank, 1);
  EXPECT_EQ((*r2.result)->local_rank, 1);
}

TEST(RendezvousRoundsTest, RejectsUnknownRoundAndOutOfRangeRank) {
  RendezvousRounds rdv;
  RendezvousRounds::Releases releases;
  bool completed = false;
  Outcome o;
  EXPECT_TRUE(absl::IsNotFound(
      rdv.Join(1, 1, 0, "x", "gloo", Capture(&o), &releases, &completed)));
  rdv.Open(1, 1, {0, 1});
  EXPECT_TRUE(absl::IsInvalidArgument(
      rdv.Join(1, 1, 2, "", "gloo", Capture(&o), &releases, &completed)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      rdv.Join(1, 1, 0, "", "gloo", Capture(&o), &releases, &completed)))
      << "rank 0 must bring the bootstrap";
}

TEST(RendezvousRoundsTest, SingleRankJoinsWithoutBootstrap) {
  RendezvousRounds rdv;
  rdv.Open(3, 1, {0});
  Outcome o;
  RendezvousRounds::Releases releases;
  bool completed = false;
  ASSERT_TRUE(rdv.Join(3, 1, 0, "", "gloo", Capture(&o), &releases, &completed).ok());
  EXPECT_TRUE(completed);
  ASSERT_EQ(releases.size(), 1u);
  for (auto& [cb, result] : releases) cb(std::move(result));
  ASSERT_TRUE(o.result.has_value());
  ASSERT_TRUE(o.result->ok()) << o.result->status();
  EXPECT_EQ((*o.result)->world_size, 1);
}

TEST(RendezvousRoundsTest, RepeatedJoinSupersedesEarlierWaiter) {
  RendezvousRounds rdv;
  rdv.Open(1, 1, {0, 1});
  Outcome first, second;
  RendezvousRounds::Releases releases;
  bool completed = false;
  ASSERT_TRUE(rdv.Join(1, 1, 1, "", "gloo", Capture(&first), &releases, &completed).ok());
  ASSERT_TRUE(
      rdv.Join(1, 1, 1, "", "gloo", Capture(&second), &releases, &completed).ok());
  ASSERT_EQ(releases.size(), 1u);
  for (auto& [cb, result] : releases) cb(std::move(result));
  ASSERT_TRUE(first.result.has_value());
  EXPECT_TRUE(absl::IsAborted(first.result->status()));
  EXPECT_FALSE(second.result.has_value());
}

TEST(RendezvousRoundsTest, CloseFailsWaitersWithReason) {
  RendezvousRounds rdv;
  rdv.Open(3, 2, {0, 1});
  Outcome o;
  RendezvousRounds::Releases releases;
  bool completed = false;
  ASSERT_TRUE(rdv.Join(3, 2, 1, "", "gloo", Capture(&o), &releases, &completed).ok());
  auto closed = rdv.Close(3, 2, absl::AbortedError("rank 0 exited with code 1"));
  ASSERT_EQ(closed.size(), 1u);
  for (auto& [cb, result] : closed) cb(std::move(result));
  ASSERT_TRUE(o.result.has_value());
  EXPECT_THAT(o.result->status().message(), ::testing::HasSubstr("rank 0 exited"));
  EXPECT_FALSE(rdv.IsOpen(3, 2));
}

}  // namespace
}  // namespace tessera
