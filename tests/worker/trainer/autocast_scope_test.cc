// Mixed precision for a forward pass (model/autocast_scope.h): CUDA autocast
// on for the scope's lifetime, and the state it found restored after it.
#include "worker/trainer/model/autocast_scope.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/version.h>

namespace tessera::trainer {
namespace {

// LibTorch 2.4 made autocast's state per device type.
bool CudaAutocastOn() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

at::ScalarType CudaAutocastType() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}

TEST(AutocastScopeTest, ADisabledScopeChangesNothing) {
  ASSERT_FALSE(CudaAutocastOn());
  {
    AutocastScope off(false, at::kHalf);
    EXPECT_FALSE(CudaAutocastOn());
  }
  EXPECT_FALSE(CudaAutocastOn());
}

TEST(AutocastScopeTest, TurnsCudaAutocastOnInItsTypeAndRestoresItAfter) {
  ASSERT_FALSE(CudaAutocastOn());
  {
    AutocastScope outer(true, at::kBFloat16);
    EXPECT_TRUE(CudaAutocastOn());
    EXPECT_EQ(CudaAutocastType(), at::kBFloat16);
    {
      AutocastScope inner(true, at::kHalf);
      EXPECT_TRUE(CudaAutocastOn());
      EXPECT_EQ(CudaAutocastType(), at::kHalf);
    }
    // The inner scope found autocast on and leaves it on.
    EXPECT_TRUE(CudaAutocastOn());
  }
  EXPECT_FALSE(CudaAutocastOn());
}

}  // namespace
}  // namespace tessera::trainer
