// GpuMonitor over NVML loaded at run time: a missing library is Unavailable
// (callers report no GPU figures), and the fake NVML library
// (tests/testing/fake_nvml.c) is read through the real dlopen path.
#include "common/gpu_monitor.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(GpuMonitorTest, MissingLibraryIsUnavailableNotACrash) {
  auto monitor = OpenNvml("libtessera-no-such-nvml.so.1");
  EXPECT_TRUE(absl::IsUnavailable(monitor.status())) << monitor.status();
}

TEST(GpuMonitorTest, ReadsAFakeNvmlByIndexAndByUuid) {
  auto monitor = OpenNvml(TESSERA_FAKE_NVML);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  auto first = (*monitor)->Read("0");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->utilization_percent, 40);
  EXPECT_EQ(first->memory_used_bytes, int64_t{1} << 30);
  EXPECT_EQ(first->memory_total_bytes, int64_t{16} << 30);
  EXPECT_EQ(first->temperature_celsius, 50);
  EXPECT_DOUBLE_EQ(*first->power_watts, 100.5);
  auto second = (*monitor)->Read("GPU-fake-1");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->utilization_percent, 50);
  EXPECT_TRUE(absl::IsNotFound((*monitor)->Read("7").status()));
  EXPECT_TRUE(absl::IsNotFound((*monitor)->Read("MIG-abc").status()));
}

}  // namespace
}  // namespace tessera
