// The CUDA-event step timer. Built wherever the CUDA runtime is found; the
// timing test needs a visible device and skips (saying so) without one.
#include "worker/trainer/gpu/cuda_step_timer.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

int Devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

TEST(CudaStepTimerTest, AnInvisibleDeviceIsAFailedPrecondition) {
  EXPECT_EQ(MakeCudaStepTimer(Devices(), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaStepTimerTest, MeasuresDeviceWorkBetweenMarks) {
  if (Devices() == 0) GTEST_SKIP() << "no CUDA device is visible";
  absl::StatusOr<std::unique_ptr<StepTimer>> timer = MakeCudaStepTimer(0, nullptr);
  ASSERT_TRUE(timer.ok()) << timer.status();
  EXPECT_TRUE((*timer)->on_device());
  void* buffer = nullptr;
  const size_t bytes = size_t{256} << 20;
  ASSERT_EQ(cudaMalloc(&buffer, bytes), cudaSuccess);
  (*timer)->BeginStep();
  (*timer)->Mark(StepPhase::kData);
  for (int i = 0; i < 20; ++i) cudaMemsetAsync(buffer, i, bytes, nullptr);
  (*timer)->Mark(StepPhase::kBackward);
  (*timer)->EndStep();
  const StepTimes times = (*timer)->TakeTotals();
  cudaFree(buffer);
  EXPECT_EQ(times.steps, 1);
  // 5 GiB of memset takes well over a tenth of a millisecond on any GPU.
  EXPECT_GT(times.seconds(StepPhase::kBackward), 1e-4);
  EXPECT_GE(times.step_seconds, times.seconds(StepPhase::kBackward));
  EXPECT_EQ(times.seconds(StepPhase::kForward), 0.0);
}

}  // namespace
}  // namespace tessera::trainer
