// The host settings of a rank's process (run/host_runtime.h).
#include "worker/trainer/run/host_runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

namespace tessera::trainer {
namespace {

TEST(HostRuntimeTest, SetsLibTorchsComputeThreads) {
  ConfigureComputeThreads(2);
  EXPECT_EQ(at::get_num_threads(), 2);
  ConfigureComputeThreads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(HostRuntimeTest, GlibcTakesTheHeapSettings) {
#ifdef __GLIBC__
  EXPECT_TRUE(ConfigureHostAllocator());
#else
  EXPECT_FALSE(ConfigureHostAllocator());
#endif
}

}  // namespace
}  // namespace tessera::trainer
