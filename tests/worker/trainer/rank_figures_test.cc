// The rank's device figures without LibTorch: peak RSS on a CPU rank, NVML's
// figures through a fake NVML library, and none (no error) without NVML.
#include "worker/trainer/gpu/rank_figures.h"

#include <fstream>
#include <map>

#include "common/device_figures.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera::trainer {
namespace {

std::map<std::string, double> AsMap(const FigureValues& values) {
  return std::map<std::string, double>(values.begin(), values.end());
}

TEST(DeviceFiguresTest, PeakRssIsReadFromProcStatus) {
  testing::TempDir dir;
  std::ofstream(dir.File("status")) << "Name:\ttessera-train\nVmPeak:\t  900 kB\n"
                                    << "VmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
  EXPECT_EQ(PeakRssBytes(dir.File("status")), 2048 * 1024);
  EXPECT_EQ(PeakRssBytes(dir.File("missing")), std::nullopt);
  // This process has one.
  FigureValues values;
  AppendPeakRss(values);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].first, kPeakRssFigure);
  EXPECT_GT(values[0].second, 1 << 20);
}

TEST(DeviceFiguresTest, RankGpuIdIsItsVisibleDevice) {
  EXPECT_EQ(RankGpuId(std::string("3"), 0), "3");
  EXPECT_EQ(RankGpuId(std::string("GPU-a,GPU-b"), 1), "GPU-b");
  EXPECT_EQ(RankGpuId(std::nullopt, 2), "2");
}

TEST(DeviceFiguresTest, WithoutNvmlNoGpuFiguresAndNoError) {
  auto monitor = OpenNvml("libtessera-no-such-nvml.so.1");
  ASSERT_FALSE(monitor.ok());
  FigureValues values;
  AppendNvmlFigures(nullptr, "0", values);
  EXPECT_TRUE(values.empty());
}

TEST(DeviceFiguresTest, GpuFiguresComeFromAFakeNvml) {
  auto monitor = OpenNvml(TESSERA_FAKE_NVML);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  FigureValues values;
  AppendNvmlFigures(monitor->get(), "GPU-fake-1", values);
  const auto figures = AsMap(values);
  EXPECT_EQ(figures.at(kGpuUtilizationFigure), 50);
  EXPECT_EQ(figures.at(kGpuMemoryUsedFigure), double(int64_t{2} << 30));
  // A GPU the library does not know: nothing, no error.
  FigureValues none;
  AppendNvmlFigures(monitor->get(), "9", none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace tessera::trainer
