// The metrics of a metrics interval (run/interval_metrics.h): their names,
// order and values from the loop's tallies and the step timer's totals.
#include "worker/trainer/run/interval_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/metric_names.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

StepTimes FourSteps() {
  StepTimes times;
  times.steps = 4;
  times.step_seconds = 2.0;
  times.phase_seconds = {0.4, 0.8, 0.6, 0.1, 0.1};  // data .. optimizer
  return times;
}

std::vector<std::string> Names(const FigureValues& values) {
  std::vector<std::string> names;
  for (const auto& [name, value] : values) names.push_back(name);
  return names;
}

TEST(IntervalMetricsTest, ReportsTheMeansOfTheIntervalInOrder) {
  IntervalFigures figures;
  figures.times = FourSteps();
  figures.loss_sum = 6.0;
  figures.micro_batches = 4;
  figures.images = 128;
  figures.lr = 0.01;
  figures.epoch = 1.5;
  EXPECT_THAT(IntervalMetrics(figures),
              ElementsAre(Pair("loss", 1.5), Pair("images_per_sec", 64.0),
                          Pair("time_data_ms", 100.0), Pair("time_forward_ms", 200.0),
                          Pair("time_backward_ms", 150.0), Pair("time_comm_ms", 25.0),
                          Pair("time_optimizer_ms", 25.0), Pair("time_step_ms", 500.0),
                          Pair("lr", 0.01), Pair("epoch", 1.5)));
}

TEST(IntervalMetricsTest, AddsWhatAppliesToTheRunAfterTheMeans) {
  IntervalFigures figures;
  figures.times = FourSteps();
  figures.loss_sum = 1.0;
  figures.micro_batches = 1;
  figures.loss_scale = 1024.0;
  figures.bytes_sent = 4000;
  figures.data_skipped = 3;
  figures.device_memory = {{"peak_rss_bytes", 5.0}};
  figures.sizes = RankSizes{
      .optimizer_state_bytes = 800, .gradient_bytes = 400, .parameter_bytes = 400};
  const FigureValues values = IntervalMetrics(figures);
  const std::vector<std::string> names = Names(values);
  ASSERT_EQ(names.size(), 17u);
  EXPECT_THAT(std::vector<std::string>(names.begin() + 10, names.end()),
              ElementsAre("loss_scale", "comm_bytes_per_step", "data_skipped",
                          "peak_rss_bytes", kOptimizerStateBytesMetricName,
                          kGradientBytesMetricName, kParameterBytesMetricName));
  EXPECT_EQ(values[10].second, 1024.0);
  EXPECT_EQ(values[11].second, 1000.0);  // per step
  EXPECT_EQ(values[12].second, 3.0);
  EXPECT_EQ(values[13].second, 5.0);
  EXPECT_EQ(values[14].second, 800.0);
  EXPECT_EQ(values[16].second, 400.0);
}

TEST(IntervalMetricsTest, LeavesOutWhatDoesNotApply) {
  IntervalFigures figures;
  figures.times = FourSteps();
  figures.micro_batches = 1;
  EXPECT_EQ(IntervalMetrics(figures).size(), 10u);  // no scale, bytes, skips, sizes
}

TEST(IntervalMetricsTest, AnIntervalWithoutTimedStepsReportsZeros) {
  IntervalFigures figures;
  figures.micro_batches = 1;
  figures.images = 32;
  for (const auto& [name, value] : IntervalMetrics(figures)) {
    if (name != "loss") EXPECT_EQ(value, 0.0) << name;
  }
}

TEST(IntervalMetricsTest, TheDevicesMeansNameEveryStepTimerPhase) {
  const FigureValues device = DeviceStepMs(FourSteps());
  ASSERT_EQ(device.size(), kStepPhaseNames.size());
  for (size_t p = 0; p < device.size(); ++p) {
    EXPECT_EQ(device[p].first, kStepPhaseNames[p]);
  }
  EXPECT_EQ(device[1].second, 200.0);
}

TEST(IntervalMetricsTest, EpochsDoneCountsTheShareOfTheCurrentEpoch) {
  // 100 samples, 2 ranks x 5 per micro-batch, 2 micro-batches a step: 20
  // samples a step, 5 steps an epoch.
  const absl::StatusOr<EpochPlan> plan = EpochPlan::Create(
      EpochPlanOptions{.epoch_size = 100, .world_size = 2, .batch_size = 5, .accum = 2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(EpochsDone(DataPosition{1, 40}, *plan, 2), 1.4);
  EXPECT_DOUBLE_EQ(EpochsDone(DataPosition{3, 0}, *plan, 2), 3.0);
}

}  // namespace
}  // namespace tessera::trainer
