// Where a rank trains (run/device_placement.h): the CPU when asked or when no
// CUDA device is visible, one CUDA device per local rank, and mixed precision
// only on CUDA.
#include "worker/trainer/run/device_placement.h"

#include <c10/core/Device.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "worker/trainer/gpu/device.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

TEST(DevicePlacementTest, ACpuRankIsOnTheCpu) {
  TrainerOptions options;
  options.device = "cpu";
  const absl::StatusOr<DevicePlacement> placement = ResolveDevice(options, 5);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_FALSE(placement->cuda);
  EXPECT_EQ(placement->index, -1);
  EXPECT_EQ(placement->name(), "cpu");
  EXPECT_EQ(TorchDevice(*placement), c10::Device(c10::kCPU));
  EXPECT_TRUE(MakePlacementCurrent(*placement).ok());
}

TEST(DevicePlacementTest, ACudaPlacementNamesItsDevice) {
  const DevicePlacement placement{.cuda = true, .index = 3};
  EXPECT_EQ(placement.name(), "cuda:3");
  EXPECT_EQ(TorchDevice(placement), c10::Device(c10::kCUDA, 3));
}

TEST(DevicePlacementTest, MixedPrecisionNeedsACudaDevice) {
  TrainerOptions options;
  options.device = "cpu";
  options.precision = "bf16";
  const absl::Status refused = ResolveDevice(options, 0).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--precision=fp32"));
}

TEST(DevicePlacementTest, AutoTakesCudaWhereItCanAndTheCpuElsewhere) {
  TrainerOptions options;  // --device=auto
  const absl::StatusOr<DevicePlacement> placement = ResolveDevice(options, 0);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->cuda, VisibleTorchCudaDevices() > 0);
}

TEST(DevicePlacementTest, CudaWithoutAVisibleDeviceFails) {
  if (VisibleTorchCudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  TrainerOptions options;
  options.device = "cuda";
  EXPECT_EQ(ResolveDevice(options, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DevicePlacementTest, EachLocalRankGetsADeviceOfItsOwn) {
  EXPECT_EQ(CudaDeviceForLocalRank(2, 4).value_or(-1), 2);
  // One visible device: the launcher gave this rank its own.
  EXPECT_EQ(CudaDeviceForLocalRank(3, 1).value_or(-1), 0);
  const absl::Status extra = CudaDeviceForLocalRank(4, 4).status();
  EXPECT_EQ(extra.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(extra.message(), HasSubstr("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(CudaDeviceForLocalRank(0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::trainer
