#include "worker/trainer/dist/bucket_plan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The parameters of each bucket, in slot order.
std::vector<std::vector<int>> Members(const BucketPlan& plan) {
  std::vector<std::vector<int>> members;
  for (const Bucket& bucket : plan.buckets) {
    members.emplace_back();
    for (const BucketSlot& slot : bucket.slots) members.back().push_back(slot.param);
  }
  return members;
}

BucketOptions Caps(int64_t first_bytes, int64_t bytes) {
  BucketOptions options;
  options.first_bucket_cap_bytes = first_bytes;
  options.bucket_cap_bytes = bytes;
  return options;
}

TEST(AssignBucketsTest, FillsBucketsInReverseRegistrationOrder) {
  // Five float parameters of 10 elements (40 bytes); buckets hold 80 bytes.
  const BucketPlan plan = AssignBuckets({10, 10, 10, 10, 10}, 4, Caps(80, 80));
  EXPECT_THAT(Members(plan),
              ElementsAre(ElementsAre(4, 3), ElementsAre(2, 1), ElementsAre(0)));
  EXPECT_THAT(plan.bucket_of, ElementsAre(2, 1, 1, 0, 0));
  EXPECT_THAT(plan.slot_of, ElementsAre(0, 1, 0, 1, 0));
}

TEST(AssignBucketsTest, FirstBucketHasItsOwnSmallerCap) {
  const BucketPlan plan = AssignBuckets({10, 10, 10, 10, 10, 10}, 4, Caps(40, 160));
  EXPECT_THAT(Members(plan),
              ElementsAre(ElementsAre(5), ElementsAre(4, 3, 2, 1), ElementsAre(0)));
}

TEST(AssignBucketsTest, ClosesABucketRatherThanOverflowIt) {
  // 30 + 30 fit in 64 elements' worth; the next 30 would overflow, so it starts
  // the next bucket.
  const BucketPlan plan = AssignBuckets({30, 30, 30}, 1, Caps(64, 64));
  EXPECT_THAT(Members(plan), ElementsAre(ElementsAre(2, 1), ElementsAre(0)));
  for (const Bucket& bucket : plan.buckets) EXPECT_LE(bucket.numel, 64);
}

TEST(AssignBucketsTest, MinBucketsSplitsAModelSmallerThanTheFirstCap) {
  // 16 parameters of 100 floats (6400 bytes) all fit under the 1 MiB first cap:
  // one bucket with DDP's caps alone, at least four with min_buckets = 4.
  const std::vector<int64_t> numels(16, 100);
  BucketOptions ddp;
  EXPECT_EQ(AssignBuckets(numels, 4, ddp).buckets.size(), 1u);
  BucketOptions split = ddp;
  split.min_buckets = 4;
  split.min_bucket_bytes = 1;
  const BucketPlan plan = AssignBuckets(numels, 4, split);
  EXPECT_EQ(plan.buckets.size(), 4u);
  for (const Bucket& bucket : plan.buckets) EXPECT_LE(bucket.numel * 4, 1600);
}

TEST(AssignBucketsTest, MinBucketsNeverMakesBucketsSmallerThanMinBucketBytes) {
  const std::vector<int64_t> numels(16, 100);
  BucketOptions split;
  split.min_buckets = 16;
  split.min_bucket_bytes = 1600;  // four parameters' worth
  const BucketPlan plan = AssignBuckets(numels, 4, split);
  EXPECT_EQ(plan.buckets.size(), 4u);
}

TEST(AssignBucketsTest, MinBucketsLeavesLargeModelsAtTheirCaps) {
  // 256 MiB of gradients: 256 / 8 = 32 MiB is above both caps, which stay.
  const std::vector<int64_t> numels(256, int64_t{1} << 18);  // 1 MiB each
  BucketOptions ddp;
  BucketOptions split = ddp;
  split.min_buckets = 8;
  EXPECT_EQ(Members(AssignBuckets(numels, 4, split)),
            Members(AssignBuckets(numels, 4, ddp)));
}

TEST(AssignBucketsTest, AParameterLargerThanTheCapGetsABucketToItself) {
  const BucketPlan plan = AssignBuckets({5, 1000, 5, 5}, 4, Caps(64, 64));
  EXPECT_THAT(Members(plan),
              ElementsAre(ElementsAre(3, 2), ElementsAre(1), ElementsAre(0)));
  EXPECT_EQ(plan.buckets[1].numel, 1000);
}

TEST(AssignBucketsTest, OffsetsAreContiguousWithinEachBucket) {
  const BucketPlan plan = AssignBuckets({3, 7, 2, 9, 4}, 4, Caps(40, 48));
  int64_t total = 0;
  for (const Bucket& bucket : plan.buckets) {
    int64_t offset = 0;
    for (const BucketSlot& slot : bucket.slots) {
      EXPECT_EQ(slot.offset, offset);
      offset += slot.numel;
    }
    EXPECT_EQ(bucket.numel, offset);
    total += bucket.numel;
  }
  EXPECT_EQ(total, 3 + 7 + 2 + 9 + 4);
}

TEST(AssignBucketsTest, EmptyParametersStillBelongToABucket) {
  const BucketPlan plan = AssignBuckets({4, 0, 4}, 4, Caps(1 << 20, 1 << 20));
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_THAT(plan.bucket_of, ElementsAre(0, 0, 0));
  EXPECT_TRUE(AssignBuckets({}, 4, BucketOptions()).buckets.empty());
}

TEST(ShardTest, ShardsCutABucketIntoEqualPartsClippedAtItsEnd) {
  EXPECT_EQ(ShardSize(10, 4), 3);
  EXPECT_EQ(ShardOf(10, 4, 0).begin, 0);
  EXPECT_EQ(ShardOf(10, 4, 0).end, 3);
  EXPECT_EQ(ShardOf(10, 4, 3).begin, 9);
  EXPECT_EQ(ShardOf(10, 4, 3).size(), 1);
  // A bucket smaller than the world leaves the last ranks nothing.
  EXPECT_EQ(ShardOf(2, 4, 3).size(), 0);
  EXPECT_EQ(ShardOf(7, 1, 0).size(), 7);
}

TEST(ShardTest, EveryElementBelongsToExactlyOneRanksPiece) {
  BucketOptions options;
  options.bucket_cap_bytes = 40;
  options.first_bucket_cap_bytes = 24;
  const std::vector<int64_t> numels = {5, 3, 0, 7, 2, 9};
  const BucketPlan plan = AssignBuckets(numels, 4, options);
  for (const int world : {1, 2, 3, 5}) {
    std::vector<std::vector<int>> owners(numels.size());
    for (size_t p = 0; p < numels.size(); ++p) {
      owners[p].assign(static_cast<size_t>(numels[p]), 0);
    }
    for (int rank = 0; rank < world; ++rank) {
      for (const ShardPiece& piece : AssignShardPieces(plan, world, rank)) {
        const Bucket& bucket = plan.buckets[static_cast<size_t>(piece.bucket)];
        const ShardRange shard = ShardOf(bucket.numel, world, rank);
        EXPECT_GE(piece.bucket_offset, shard.begin);
        EXPECT_LE(piece.bucket_offset + piece.numel, shard.end);
        EXPECT_EQ(plan.bucket_of[static_cast<size_t>(piece.param)], piece.bucket);
        for (int64_t e = 0; e < piece.numel; ++e) {
          ++owners[static_cast<size_t>(piece.param)]
                  [static_cast<size_t>(piece.param_offset + e)];
        }
      }
    }
    for (const std::vector<int>& param : owners) {
      for (const int count : param) EXPECT_EQ(count, 1) << "world " << world;
    }
  }
}

TEST(AssignBucketsTest, MebibytesConvertToBytes) {
  EXPECT_EQ(MebibytesToBytes(25), 25 * 1024 * 1024);
  EXPECT_EQ(MebibytesToBytes(0.5), 512 * 1024);
  EXPECT_EQ(MebibytesToBytes(1e-9), 1);
}

TEST(FlattenBucketTest, UnflattenRestoresWhatFlattenPacked) {
  const BucketPlan plan = AssignBuckets({3, 5, 2}, 4, Caps(1 << 20, 1 << 20));
  ASSERT_EQ(plan.buckets.size(), 1u);
  std::vector<std::vector<float>> params = {{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}};
  std::vector<float> flat(static_cast<size_t>(plan.buckets[0].numel), -1.0f);
  FlattenBucket(plan.buckets[0], {params[0].data(), params[1].data(), params[2].data()},
                flat.data());
  // Reverse registration order: parameter 2 first.
  EXPECT_THAT(flat, ElementsAre(9, 10, 4, 5, 6, 7, 8, 1, 2, 3));

  std::vector<std::vector<float>> restored = {
      std::vector<float>(3), std::vector<float>(5), std::vector<float>(2)};
  UnflattenBucket(plan.buckets[0], flat.data(),
                  {restored[0].data(), restored[1].data(), restored[2].data()});
  EXPECT_EQ(restored, params);
}

class BucketLaunchSequencerTest : public ::testing::Test {
 protected:
  // Three buckets: {5, 4}, {3, 2}, {1, 0}.
  BucketPlan plan_ = AssignBuckets({10, 10, 10, 10, 10, 10}, 4, Caps(80, 80));
};

TEST_F(BucketLaunchSequencerTest, LaunchesABucketOnceAllItsGradientsAreReady) {
  ASSERT_EQ(plan_.buckets.size(), 3u);
  BucketLaunchSequencer sequencer(plan_);
  EXPECT_THAT(sequencer.MarkReady(5), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(4), ElementsAre(0));
  EXPECT_THAT(sequencer.MarkReady(3), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(2), ElementsAre(1));
  EXPECT_THAT(sequencer.MarkReady(1), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(0), ElementsAre(2));
  EXPECT_EQ(sequencer.launched(), 3);
  EXPECT_THAT(sequencer.LaunchRemaining(), IsEmpty());
}

TEST_F(BucketLaunchSequencerTest, KeepsBucketOrderWhenReadinessComesOutOfOrder) {
  BucketLaunchSequencer sequencer(plan_);
  // Bucket 2 and bucket 1 complete before bucket 0: they wait for it.
  EXPECT_THAT(sequencer.MarkReady(0), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(1), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(3), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(2), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(4), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(5), ElementsAre(0, 1, 2));
}

TEST_F(BucketLaunchSequencerTest, EveryReadinessOrderYieldsTheSameLaunchOrder) {
  std::vector<int> order = {0, 1, 2, 3, 4, 5};
  do {
    BucketLaunchSequencer sequencer(plan_);
    std::vector<int> launched;
    for (const int param : order) {
      for (const int bucket : sequencer.MarkReady(param)) launched.push_back(bucket);
    }
    EXPECT_THAT(launched, ElementsAre(0, 1, 2));
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_F(BucketLaunchSequencerTest, RepeatedReadinessCountsOnce) {
  BucketLaunchSequencer sequencer(plan_);
  EXPECT_THAT(sequencer.MarkReady(5), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(5), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(-1), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(99), IsEmpty());
  EXPECT_EQ(sequencer.launched(), 0);
  EXPECT_THAT(sequencer.MarkReady(4), ElementsAre(0));
}

TEST_F(BucketLaunchSequencerTest, LaunchRemainingCoversGradientsThatNeverArrived) {
  BucketLaunchSequencer sequencer(plan_);
  EXPECT_THAT(sequencer.MarkReady(5), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(4), ElementsAre(0));
  // Parameters 0-3 got no gradient this pass.
  EXPECT_THAT(sequencer.LaunchRemaining(), ElementsAre(1, 2));
  EXPECT_THAT(sequencer.LaunchRemaining(), IsEmpty());
}

TEST_F(BucketLaunchSequencerTest, ResetStartsAFreshPass) {
  BucketLaunchSequencer sequencer(plan_);
  for (int param = 5; param >= 0; --param) sequencer.MarkReady(param);
  EXPECT_EQ(sequencer.launched(), 3);
  sequencer.Reset();
  EXPECT_EQ(sequencer.launched(), 0);
  EXPECT_THAT(sequencer.MarkReady(5), IsEmpty());
  EXPECT_THAT(sequencer.MarkReady(4), ElementsAre(0));
}

}  // namespace
}  // namespace tessera::trainer
