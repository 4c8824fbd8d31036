#include "worker/trainer/dist/gloo_communicator.h"

#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/gloo_group.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace tessera::trainer {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// A Gloo group of `world` ranks on loopback (see gloo_group.h).
void RunGroup(int world, const std::function<void(int, Communicator&)>& body) {
  testing::RunGlooGroup(world, body, kTimeout);
}

TEST(RendezvousStoreTest, HostedStoreOnPortZeroReportsTheBoundPort) {
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Host("127.0.0.1", 0, kTimeout);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_GT((*store)->port(), 0);
  EXPECT_EQ((*store)->address(), "127.0.0.1:" + std::to_string((*store)->port()));
  // Something really listens there.
  EXPECT_TRUE(RendezvousStore::Connect("127.0.0.1", (*store)->port(), kTimeout).ok());
}

TEST(RendezvousStoreTest, ConnectingWhereNoStoreListensFailsWithAStatus) {
  int free_port = 0;
  {
    absl::StatusOr<std::unique_ptr<RendezvousStore>> probe =
        RendezvousStore::Host("127.0.0.1", 0, kTimeout);
    ASSERT_TRUE(probe.ok()) << probe.status();
    free_port = (*probe)->port();
  }
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Connect("127.0.0.1", free_port, absl::Milliseconds(300));
  EXPECT_FALSE(store.ok());
}

TEST(GlooCommunicatorTest, TwoRanksAverageTheirGradients) {
  RunGroup(2, [](int rank, Communicator& communicator) {
    EXPECT_EQ(communicator.rank(), rank);
    EXPECT_EQ(communicator.world_size(), 2);
    EXPECT_EQ(communicator.backend(), "gloo");
    // rank 0: [1, 2, 3, 4]; rank 1: [3, 6, 9, 12]
    torch::Tensor gradients =
        torch::arange(1, 5, torch::kFloat) * static_cast<float>(1 + 2 * rank);
    ASSERT_TRUE(communicator.AllReduceSum(gradients).ok());
    gradients.div_(communicator.world_size());
    EXPECT_TRUE(torch::allclose(gradients, torch::tensor({2.0f, 4.0f, 6.0f, 8.0f})))
        << "rank " << rank << ": " << gradients;
  });
}

// Eight buckets launched back to back and waited for in reverse, as the reducer
// does during backward: every one is the exact sum, identical bit for bit on
// both ranks, whichever way the two ranks combine.
// Rank `rank`'s bucket `b`: distinct, non-trivial values without the global
// RNG, which both rank threads of this process would share.
torch::Tensor Values(int rank, int b) {
  return torch::sin(torch::arange(1000 + 37 * b, torch::kFloat) * (1.3 + 0.7 * rank) +
                    0.1 * b);
}

void ExpectManyInFlightSumsAgree(bool pairwise_exchange) {
  constexpr int kBuckets = 8;
  std::vector<std::vector<torch::Tensor>> results(2);
  testing::RunGlooGroup(
      2,
      [&](int rank, Communicator& communicator) {
        auto& gloo = dynamic_cast<GlooCommunicator&>(communicator);
        EXPECT_EQ(gloo.allreduce_algorithm(),
                  pairwise_exchange ? "pairwise-exchange" : "ring");
        std::vector<torch::Tensor> buckets;
        std::vector<std::unique_ptr<PendingCollective>> pending;
        for (int b = 0; b < kBuckets; ++b) buckets.push_back(Values(rank, b));
        for (torch::Tensor& bucket : buckets) {
          pending.push_back(communicator.AllReduceSumAsync(bucket));
        }
        for (int b = kBuckets - 1; b >= 0; --b) {
          ASSERT_TRUE(pending[static_cast<size_t>(b)]->Wait().ok());
        }
        results[static_cast<size_t>(rank)] = buckets;
      },
      kTimeout, pairwise_exchange);
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBuckets));
  ASSERT_EQ(results[1].size(), static_cast<size_t>(kBuckets));
  for (int b = 0; b < kBuckets; ++b) {
    const torch::Tensor mine = Values(0, b);
    const torch::Tensor theirs = Values(1, b);
    const torch::Tensor& r0 = results[0][static_cast<size_t>(b)];
    const torch::Tensor& r1 = results[1][static_cast<size_t>(b)];
    EXPECT_TRUE(torch::equal(r0, r1)) << "bucket " << b << " differs across ranks";
    EXPECT_TRUE(torch::allclose(r0, mine + theirs, 1e-6, 1e-6)) << "bucket " << b;
  }
}

TEST(GlooCommunicatorTest, TwoRanksAllReduceByOnePairwiseExchange) {
  ExpectManyInFlightSumsAgree(/*pairwise_exchange=*/true);
}

TEST(GlooCommunicatorTest, TwoRanksCanUseGloosRingInstead) {
  ExpectManyInFlightSumsAgree(/*pairwise_exchange=*/false);
}

TEST(GlooCommunicatorTest, FourRanksSumFloat64AndInt64) {
  RunGroup(4, [](int rank, Communicator& communicator) {
    // Pairwise exchange is for two ranks only; four use the reduce-scatter and
    // all-gather ring.
    EXPECT_EQ(dynamic_cast<GlooCommunicator&>(communicator).allreduce_algorithm(),
              "reduce-scatter-all-gather");
    torch::Tensor counts = torch::tensor({static_cast<int64_t>(rank), int64_t{1}});
    torch::Tensor sums = torch::tensor({0.5 * rank, 1.0}, torch::kDouble);
    ASSERT_TRUE(communicator.AllReduceSum(counts).ok());
    ASSERT_TRUE(communicator.AllReduceSum(sums).ok());
    EXPECT_TRUE(torch::equal(counts, torch::tensor({int64_t{6}, int64_t{4}})));
    EXPECT_TRUE(torch::allclose(sums, torch::tensor({3.0, 4.0}, torch::kDouble)));
  });
}

TEST(GlooCommunicatorTest, BroadcastCopiesTheRootTensorToEveryRank) {
  RunGroup(3, [](int rank, Communicator& communicator) {
    torch::Tensor values = torch::full({5}, static_cast<float>(rank + 10));
    ASSERT_TRUE(communicator.Broadcast(values, 1).ok());
    EXPECT_TRUE(torch::equal(values, torch::full({5}, 11.0f))) << "rank " << rank;
    EXPECT_TRUE(communicator.Barrier().ok());
  });
}

TEST(GlooCommunicatorTest, RejectsTensorsItCannotReduce) {
  RunGroup(2, [](int rank, Communicator& communicator) {
    torch::Tensor strided = torch::zeros({4, 4}).t();
    EXPECT_EQ(communicator.AllReduceSum(strided).code(),
              absl::StatusCode::kInvalidArgument);
    torch::Tensor half = torch::zeros({4}, torch::kHalf);
    EXPECT_EQ(communicator.AllReduceSum(half).code(), absl::StatusCode::kInvalidArgument);
    torch::Tensor fine = torch::ones({2});
    EXPECT_EQ(communicator.Broadcast(fine, 2).code(), absl::StatusCode::kInvalidArgument);
    // The group is still usable after rejected calls.
    EXPECT_TRUE(communicator.AllReduceSum(fine).ok()) << "rank " << rank;
    EXPECT_TRUE(torch::equal(fine, torch::full({2}, 2.0f)));
  });
}

// Rank 1 stops taking part after the first all-reduce but stays connected (a
// hung rank, not a dead one). Rank 0's second all-reduce, bucket 3, must fail
// within the short collective timeout with a reason that names it, and the
// collective timeout must report that reason once.
void ExpectAMissingPeerFailsNamingThePendingCollective(bool pairwise_exchange) {
  using ::testing::HasSubstr;
  using ::testing::StartsWith;
  constexpr absl::Duration kCollectiveTimeout = absl::Seconds(1);
  absl::Mutex mu;
  std::vector<std::string> fired;  // guarded by mu
  absl::Notification rank0_done;
  GlooOptions options;
  options.timeout = kCollectiveTimeout;
  options.timeout_poll_interval = absl::Milliseconds(10);
  options.pairwise_exchange = pairwise_exchange;
  options.on_collective_failure = [&](const std::string& reason) {
    absl::MutexLock lock(&mu);
    fired.push_back(reason);
  };
  testing::RunGlooGroup(2, options, [&](int rank, Communicator& communicator) {
    torch::Tensor first = torch::ones({16});
    ASSERT_TRUE(communicator.AllReduceSumAsync(first, 0)->Wait().ok());
    if (rank == 1) {
      rank0_done.WaitForNotification();
      return;
    }
    torch::Tensor second = torch::ones({16});
    const absl::Time start = absl::Now();
    std::unique_ptr<PendingCollective> pending =
        communicator.AllReduceSumAsync(second, 3);
    // What a rank would report as its phase while it waits.
    std::optional<PendingCollectiveInfo> oldest = communicator.collectives()->Oldest();
    ASSERT_TRUE(oldest.has_value());
    EXPECT_EQ(DescribeCollective(*oldest), "allreduce #2 (bucket 3)");

    const absl::Status status = pending->Wait();
    const absl::Duration waited = absl::Now() - start;
    rank0_done.Notify();
    std::cout << "rank 0's all-reduce failed after " << waited << ": " << status
              << std::endl;
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(std::string(status.message()),
                StartsWith("collective timeout: allreduce #2 (bucket 3) pending for"));
    EXPECT_GE(waited, kCollectiveTimeout);
    EXPECT_LT(waited, kCollectiveTimeout + absl::Seconds(20));
    EXPECT_EQ(communicator.collectives()->Oldest(), std::nullopt);
    // Aborted: later collectives fail at once, with the same reason.
    const absl::Status barrier = communicator.Barrier();
    EXPECT_EQ(barrier.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(barrier.message()),
                HasSubstr("collective timeout: allreduce #2 (bucket 3)"));
  });
  absl::MutexLock lock(&mu);
  ASSERT_EQ(fired.size(), 1u);
  std::cout << "collective timeout reason: " << fired[0] << std::endl;
  EXPECT_THAT(fired[0],
              StartsWith("collective timeout: allreduce #2 (bucket 3) pending for"));
  EXPECT_THAT(fired[0], HasSubstr("(limit 1.0 s)"));
}

TEST(GlooCommunicatorTest, AMissingPeerFailsTheExchangeNamingTheCollective) {
  ExpectAMissingPeerFailsNamingThePendingCollective(/*pairwise_exchange=*/true);
}

TEST(GlooCommunicatorTest, AMissingPeerFailsTheRingNamingTheCollective) {
  ExpectAMissingPeerFailsNamingThePendingCollective(/*pairwise_exchange=*/false);
}

TEST(GlooCommunicatorTest, APeerThatLeavesFailsTheCollectiveNamingIt) {
  using ::testing::StartsWith;
  absl::Mutex mu;
  std::vector<std::string> fired;  // guarded by mu
  GlooOptions options;
  options.timeout = kTimeout;  // the failure comes long before
  options.on_collective_failure = [&](const std::string& reason) {
    absl::MutexLock lock(&mu);
    fired.push_back(reason);
  };
  testing::RunGlooGroup(2, options, [&](int rank, Communicator& communicator) {
    torch::Tensor values = torch::ones({16});
    ASSERT_TRUE(communicator.AllReduceSumAsync(values, 0)->Wait().ok());
    // Rank 1 leaves: its communicator is destroyed and its connections close.
    if (rank == 1) return;
    const absl::Status status = communicator.AllReduceSumAsync(values, 1)->Wait();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()),
                StartsWith("collective failed: allreduce #2 (bucket 1): "))
        << status;
    EXPECT_EQ(communicator.Barrier().code(), absl::StatusCode::kFailedPrecondition);
  });
  absl::MutexLock lock(&mu);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_THAT(fired[0], StartsWith("collective failed: allreduce #2 (bucket 1): "));
}

TEST(GlooCommunicatorTest, TracksNothingPendingOnceCollectivesAreWaitedFor) {
  RunGroup(2, [](int rank, Communicator& communicator) {
    torch::Tensor values = torch::ones({8});
    std::unique_ptr<PendingCollective> pending =
        communicator.AllReduceSumAsync(values, 5);
    ASSERT_TRUE(pending->Wait().ok()) << "rank " << rank;
    ASSERT_TRUE(communicator.Barrier().ok());
    EXPECT_EQ(communicator.collectives()->Oldest(), std::nullopt);
    EXPECT_EQ(communicator.collectives()->issued(), 2u);
  });
}

// Rank r's contribution to a collective over `n` elements: distinct values,
// so that a chunk sent to the wrong rank or summed twice shows.
torch::Tensor Contribution(int rank, int64_t n) {
  return torch::arange(n, torch::kFloat) * 0.5f + static_cast<float>(rank * 1000);
}

// Reduce-scatter and all-gather at 1 to 4 ranks, over sizes that divide by
// the world size and sizes that do not (a rank's part may be short or empty),
// against the all-reduce: the reduce-scatter's own shard equals the
// all-reduce's there, and the all-gather puts every rank's shard in place.
// The bytes each rank sends are (N-1)/N of the buffer per collective.
TEST(GlooCommunicatorTest, ReduceScatterAndAllGatherMatchTheAllReduceAtOneToFourRanks) {
  for (const int world : {1, 2, 3, 4}) {
    RunGroup(world, [world](int rank, Communicator& communicator) {
      for (const int64_t n : {int64_t{12}, int64_t{13}, int64_t{2}, int64_t{1001}}) {
        torch::Tensor reference = Contribution(rank, n);
        ASSERT_TRUE(communicator.AllReduceSum(reference).ok());
        const ShardRange own = ShardOf(n, world, rank);

        const int64_t sent_before = communicator.bytes_sent();
        torch::Tensor scattered = Contribution(rank, n);
        std::unique_ptr<PendingCollective> pending =
            communicator.ReduceScatterSumAsync(scattered, 7);
        ASSERT_TRUE(pending->Wait().ok()) << world << " ranks, " << n << " elements";
        EXPECT_TRUE(torch::equal(scattered.narrow(0, own.begin, own.size()),
                                 reference.narrow(0, own.begin, own.size())))
            << world << " ranks, rank " << rank << ", " << n << " elements";
        int64_t others = 0;  // elements of the parts this rank passes on
        for (int step = 0; step + 1 < world; ++step) {
          others += ShardOf(n, world, ((rank - step - 1) % world + world) % world).size();
        }
        EXPECT_EQ(communicator.bytes_sent() - sent_before,
                  others * static_cast<int64_t>(sizeof(float)))
            << world << " ranks, " << n << " elements";

        // Each rank holds only its own part of the sum; the gather fills in
        // the rest.
        torch::Tensor gathered = torch::full({n}, -1.0f);
        gathered.narrow(0, own.begin, own.size())
            .copy_(reference.narrow(0, own.begin, own.size()));
        ASSERT_TRUE(communicator.AllGatherAsync(gathered, 8)->Wait().ok());
        EXPECT_TRUE(torch::equal(gathered, reference))
            << world << " ranks, rank " << rank << ", " << n << " elements";
      }
      EXPECT_EQ(communicator.collectives()->Oldest(), std::nullopt);
    });
  }
}

// From three ranks the all-reduce is the reduce-scatter and all-gather of
// the ZeRO stages: the same sums, bit for bit, as a shard's.
TEST(GlooCommunicatorTest, FromThreeRanksTheAllReduceSumsAsTheReduceScatterDoes) {
  RunGroup(3, [](int rank, Communicator& communicator) {
    const int64_t n = 1001;
    torch::Tensor summed = torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat))
                               .mul_(static_cast<float>(rank + 1));
    torch::Tensor scattered = summed.clone();
    ASSERT_TRUE(communicator.AllReduceSum(summed).ok());
    ASSERT_TRUE(communicator.ReduceScatterSum(scattered).ok());
    ASSERT_TRUE(communicator.AllGather(scattered).ok());
    EXPECT_TRUE(torch::equal(summed, scattered)) << "rank " << rank;
  });
}

// Several rings in flight at once finish in issue order with their own data.
TEST(GlooCommunicatorTest, RingsLaunchedTogetherEachReduceTheirOwnBuffer) {
  RunGroup(3, [](int rank, Communicator& communicator) {
    std::vector<torch::Tensor> buffers;
    std::vector<std::unique_ptr<PendingCollective>> pending;
    for (int b = 0; b < 5; ++b) {
      buffers.push_back(Contribution(rank, 100 + b) * static_cast<float>(b + 1));
      pending.push_back(communicator.ReduceScatterSumAsync(buffers.back(), b));
    }
    for (int b = 0; b < 5; ++b) {
      ASSERT_TRUE(pending[static_cast<size_t>(b)]->Wait().ok());
      torch::Tensor expected = (Contribution(0, 100 + b) + Contribution(1, 100 + b) +
                                Contribution(2, 100 + b)) *
                               static_cast<float>(b + 1);
      const ShardRange own = ShardOf(100 + b, 3, rank);
      EXPECT_TRUE(torch::allclose(
          buffers[static_cast<size_t>(b)].narrow(0, own.begin, own.size()),
          expected.narrow(0, own.begin, own.size())))
          << "bucket " << b;
    }
  });
}

TEST(GlooCommunicatorTest, ReduceScatterRejectsABufferThatIsNotFlat) {
  RunGroup(2, [](int /*rank*/, Communicator& communicator) {
    torch::Tensor square = torch::zeros({4, 4});
    EXPECT_EQ(communicator.ReduceScatterSum(square).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(communicator.AllGather(square).code(), absl::StatusCode::kInvalidArgument);
    torch::Tensor fine = torch::ones({3});
    EXPECT_TRUE(communicator.ReduceScatterSum(fine).ok());
  });
}

// Rank 2 of 3 stops taking part: the reduce-scatter of bucket 4 that rank 0
// waits for is aborted at the collective timeout with a reason naming it.
TEST(GlooCommunicatorTest, AReduceScatterThatNeverFinishesIsNamedAndAborted) {
  using ::testing::StartsWith;
  constexpr absl::Duration kCollectiveTimeout = absl::Seconds(1);
  absl::Mutex mu;
  std::vector<std::string> fired;  // guarded by mu
  absl::Notification done;
  GlooOptions options;
  options.timeout = kCollectiveTimeout;
  options.timeout_poll_interval = absl::Milliseconds(10);
  options.on_collective_failure = [&](const std::string& reason) {
    absl::MutexLock lock(&mu);
    fired.push_back(reason);
  };
  testing::RunGlooGroup(3, options, [&](int rank, Communicator& communicator) {
    if (rank == 2) {
      done.WaitForNotification();
      return;
    }
    torch::Tensor buffer = torch::ones({30});
    const absl::Status status = communicator.ReduceScatterSumAsync(buffer, 4)->Wait();
    if (rank == 0) {
      EXPECT_THAT(
          std::string(status.message()),
          StartsWith("collective timeout: reducescatter #1 (bucket 4) pending for"));
      done.Notify();
    }
    EXPECT_FALSE(status.ok());
  });
  absl::MutexLock lock(&mu);
  ASSERT_GE(fired.size(), 1u);
  EXPECT_THAT(fired[0], StartsWith("collective timeout: reducescatter #1 (bucket 4)"));
}

TEST(LocalCommunicatorTest, IsAWorldOfOneThatLeavesDataAlone) {
  LocalCommunicator communicator;
  torch::Tensor values = torch::tensor({1.0f, 2.0f});
  ASSERT_TRUE(communicator.AllReduceSum(values).ok());
  ASSERT_TRUE(communicator.Broadcast(values, 0).ok());
  EXPECT_TRUE(torch::equal(values, torch::tensor({1.0f, 2.0f})));
  EXPECT_EQ(communicator.world_size(), 1);
  EXPECT_EQ(communicator.Broadcast(values, 1).code(), absl::StatusCode::kInvalidArgument);
  // The world of one owns every shard: both leave the buffer as it is.
  ASSERT_TRUE(communicator.ReduceScatterSum(values).ok());
  ASSERT_TRUE(communicator.AllGather(values).ok());
  EXPECT_TRUE(torch::equal(values, torch::tensor({1.0f, 2.0f})));
}

}  // namespace
}  // namespace tessera::trainer
