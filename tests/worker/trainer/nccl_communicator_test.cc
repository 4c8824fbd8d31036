// The NCCL backend on raw device pointers. Built and linked wherever NCCL and the
// CUDA runtime are found; the collective tests need a visible CUDA device and
// skip (saying so) without one; the version tests need none.
#include "worker/trainer/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

// A device buffer of floats, freed on destruction.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& values) : size_(values.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), size_ * sizeof(float)),
              cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(data_, values.data(), size_ * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data_); }
  float* data() { return data_; }
  std::vector<float> Read() const {
    std::vector<float> values(size_);
    EXPECT_EQ(
        cudaMemcpy(values.data(), data_, size_ * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return values;
  }

 private:
  float* data_ = nullptr;
  size_t size_;
};

TEST(NcclVersionTest, FormatsBothOfNcclsVersionCodes) {
  EXPECT_EQ(FormatNcclVersion(22203), "2.22.3");
  EXPECT_EQ(FormatNcclVersion(22809), "2.28.9");
  EXPECT_EQ(FormatNcclVersion(21003), "2.10.3");
  // Before NCCL 2.9: major*1000 + minor*100 + patch.
  EXPECT_EQ(FormatNcclVersion(2708), "2.7.8");
}

TEST(NcclVersionTest, ReportsTheLoadedLibraryAndTheHeaderBuiltAgainst) {
  // ncclGetVersion needs no device.
  absl::StatusOr<NcclVersions> versions = GetNcclVersions();
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(versions->compiled, NCCL_VERSION_CODE);
  EXPECT_GE(versions->loaded, NCCL_VERSION(2, 0, 0));
}

TEST(NcclCommunicatorTest, UniqueIdIsTheSizeNcclDefines) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), kNcclUniqueIdBytes);
}

TEST(NcclCommunicatorTest, CreateRejectsABadIdOrRankWithoutTouchingTheDevice) {
  EXPECT_EQ(NcclComm::Create("short", 0, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      NcclComm::Create(std::string(kNcclUniqueIdBytes, '\0'), 2, 2, 0).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// Two ranks on two devices, each with its own values: the sum is both ranks'
// values added (which no rank had before), and a broadcast from rank 1 gives
// rank 0 rank 1's values. A collective that did nothing leaves every buffer
// wrong. (In a world of one, a sum and a broadcast leave the buffer as it was,
// so nothing could be checked there; NCCL refuses two ranks on one device.)
TEST(NcclCommunicatorTest, TwoRanksSumInPlaceAndBroadcastFromTheRoot) {
  if (VisibleCudaDevices() < 2) GTEST_SKIP() << "needs two visible CUDA devices";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::vector<float>> summed(2), broadcast(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    if (cudaSetDevice(rank) != cudaSuccess) {
      errors[rank] = "cudaSetDevice failed";
      return;
    }
    absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::Create(*id, rank, 2, rank);
    if (!comm.ok()) {
      errors[rank] = std::string(comm.status().message());
      return;
    }
    const float base = rank == 0 ? 1.0f : 10.0f;
    DeviceFloats buffer({base, 2 * base, 3 * base});
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    absl::Status reduced =
        (*comm)->AllReduceSum(buffer.data(), 3, NcclDataType::kFloat32, stream);
    cudaStreamSynchronize(stream);
    summed[rank] = buffer.Read();
    DeviceFloats own({base + 100, base + 200, base + 300});
    absl::Status sent =
        (*comm)->Broadcast(own.data(), 3, NcclDataType::kFloat32, /*root=*/1, stream);
    cudaStreamSynchronize(stream);
    broadcast[rank] = own.Read();
    if (!reduced.ok() || !sent.ok()) {
      errors[rank] = absl::StrCat(reduced.message(), " ", sent.message());
    }
    cudaStreamDestroy(stream);
  };
  std::thread r0(rank_main, 0), r1(rank_main, 1);
  r0.join();
  r1.join();
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(summed[rank], (std::vector<float>{11, 22, 33})) << "rank " << rank;
    EXPECT_EQ(broadcast[rank], (std::vector<float>{110, 210, 310})) << "rank " << rank;
  }
}

TEST(NcclCommunicatorTest, APeerThatNeverJoinsFailsCreateAtTheDeadline) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclOptions options;
  options.timeout = absl::Seconds(2);
  // Rank 1 of 2 never calls Create: the non-blocking init gives up and aborts.
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(*id, 0, 2, 0, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find("joining the NCCL communicator as rank 0 of 2"),
            absl::string_view::npos)
      << comm.status();
}

TEST(NcclCommunicatorTest, AWorldOfOneNamesItsCollectivesInOrder) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::Create(*id, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  DeviceFloats buffer({1, 2, 3});
  absl::StatusOr<std::unique_ptr<NcclPending>> pending = (*comm)->AllReduceSumAsync(
      buffer.data(), 3, NcclDataType::kFloat32, nullptr, /*bucket=*/2);
  ASSERT_TRUE(pending.ok()) << pending.status();
  ASSERT_TRUE((*pending)->Synchronize().ok());
  EXPECT_TRUE((*comm)->Barrier().ok());
  EXPECT_EQ((*comm)->collectives().issued(), 2u);
  EXPECT_EQ((*comm)->abort_reason(), std::nullopt);
}

TEST(NcclCommunicatorTest, AnAbortedCommunicatorRefusesCollectivesNamingWhy) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::Create(*id, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  (*comm)->Abort();
  ASSERT_TRUE((*comm)->abort_reason().has_value());
  const absl::Status barrier = (*comm)->Barrier();
  EXPECT_EQ(barrier.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(barrier.message().find("aborted"), absl::string_view::npos) << barrier;
}

// The figures scripts/gpu_check.sh prints: joining a world of one, and one
// all-reduce of a DDP-sized (25 MiB) bucket.
// Prints NCCL's init and 25 MiB all-reduce times at world size 1 (figures for
// scripts/gpu_check.sh; no timing is asserted).
TEST(NcclCommunicatorTest, AWorldOfOneJoinsAndReducesA25MiBBucket) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::Create(*id, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const double init_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  constexpr size_t kFloats = 25u << 18;  // 25 MiB
  DeviceFloats buffer(std::vector<float>(kFloats, 1.5f));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(
      (*comm)->AllReduceSum(buffer.data(), kFloats, NcclDataType::kFloat32, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // warm
  constexpr int kRounds = 20;
  start = absl::Now();
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_TRUE((*comm)
                    ->AllReduceSum(buffer.data(), kFloats, NcclDataType::kFloat32, stream)
                    .ok());
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const double allreduce_ms = absl::ToDoubleMilliseconds(absl::Now() - start) / kRounds;
  std::cout << "FIGURE nccl_init_world1_ms=" << init_ms << "\n"
            << "FIGURE nccl_allreduce_25mib_world1_ms=" << allreduce_ms << std::endl;
  EXPECT_EQ(buffer.Read()[kFloats - 1], 1.5f) << "a world of one sums to itself";
  cudaStreamDestroy(stream);
}

// A collective queued behind a stream that does not drain (a host function that
// blocks until released) never finishes: the collective timeout aborts the communicator
// once it has been pending for the timeout, and names it and its bucket.
TEST(NcclCommunicatorTest, TheCollectiveTimeoutAbortsACollectiveThatNeverFinishes) {
  if (VisibleCudaDevices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Notification failed;
  std::string reported;
  NcclOptions options;
  options.timeout = absl::Seconds(2);
  options.timeout_poll_interval = absl::Milliseconds(20);
  options.on_collective_failure = [&](const std::string& reason) {
    reported = reason;
    failed.Notify();
  };
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(*id, 0, 1, 0, options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  DeviceFloats buffer({1, 2, 3});
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  absl::Notification release;
  ASSERT_EQ(cudaLaunchHostFunc(
                stream,
                [](void* gate) {
                  static_cast<absl::Notification*>(gate)->WaitForNotificationWithTimeout(
                      absl::Seconds(60));
                },
                &release),
            cudaSuccess);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclPending>> pending = (*comm)->AllReduceSumAsync(
      buffer.data(), 3, NcclDataType::kFloat32, stream, /*bucket=*/7);
  ASSERT_TRUE(pending.ok()) << pending.status();
  // The abort may wait for the device, so the stream is released as soon as the
  // collective timeout has decided (its reason is recorded first).
  const absl::Time give_up = start + absl::Seconds(30);
  while (!(*comm)->abort_reason().has_value() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const double decided_s = absl::ToDoubleSeconds(absl::Now() - start);
  release.Notify();
  ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double aborted_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::cout << "FIGURE collective_timeout_timeout_s=2\n"
            << "FIGURE collective_timeout_decided_s=" << decided_s << "\n"
            << "FIGURE collective_timeout_aborted_s=" << aborted_s << "\n"
            << "FIGURE collective_timeout_reason=\"" << reported << "\"" << std::endl;
  EXPECT_GE(decided_s, 2.0) << "not before the timeout";
  EXPECT_LT(decided_s, 10.0);
  EXPECT_NE(reported.find("(bucket 7)"), std::string::npos) << reported;
  EXPECT_FALSE((*comm)->Barrier().ok()) << "an aborted communicator refuses collectives";
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

TEST(NcclCommunicatorTest, TwoDevicesSumTheirBuffers) {
  if (VisibleCudaDevices() < 2) GTEST_SKIP() << "needs two visible CUDA devices";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::vector<float>> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
      absl::StatusOr<std::unique_ptr<NcclComm>> comm =
          NcclComm::Create(*id, rank, 2, rank);
      ASSERT_TRUE(comm.ok()) << comm.status();
      DeviceFloats buffer({1.0f + rank, 10.0f * (rank + 1)});
      ASSERT_TRUE(
          (*comm)->AllReduceSum(buffer.data(), 2, NcclDataType::kFloat32, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      results[static_cast<size_t>(rank)] = buffer.Read();
    });
  }
  for (std::thread& thread : ranks) thread.join();
  EXPECT_EQ(results[0], (std::vector<float>{3, 30}));
  EXPECT_EQ(results[1], (std::vector<float>{3, 30}));
}

}  // namespace
}  // namespace tessera::trainer
