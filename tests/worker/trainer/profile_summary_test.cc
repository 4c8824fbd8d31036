// The step profile's arithmetic (profile_summary.h) on hand-made events: self
// CPU time through nesting, device time and idle time, the table and the
// Chrome trace.
#include "worker/trainer/run/profile_summary.h"

#include <string>
#include <vector>

#include "common/profile_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

ProfiledEvent Cpu(const std::string& name, uint64_t thread, int64_t start_us,
                  int64_t duration_us) {
  return ProfiledEvent{name, false, thread, start_us * 1000, duration_us * 1000};
}

ProfiledEvent Kernel(const std::string& name, uint64_t stream, int64_t start_us,
                     int64_t duration_us) {
  return ProfiledEvent{name, true, stream, start_us * 1000, duration_us * 1000};
}

const ProfileRow* Row(const ProfileSummary& summary, const std::string& name) {
  for (const ProfileRow& row : summary.rows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

TEST(ProfileStepsTest, ParsesARangeOrOneStepAndRefusesTheRest) {
  absl::StatusOr<ProfileSteps> range = ParseProfileSteps("20-25");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->first, 20);
  EXPECT_EQ(range->last, 25);
  EXPECT_EQ(range->count(), 6);
  absl::StatusOr<ProfileSteps> one = ParseProfileSteps("7");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->count(), 1);
  for (const char* bad : {"", "0-3", "5-2", "a-b", "1-2-3", "-3", "3-"}) {
    absl::StatusOr<ProfileSteps> parsed = ParseProfileSteps(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("A-B")) << bad;
  }
}

TEST(ProfileSummaryTest, SelfCpuTimeLeavesOutWhatAnOperatorCalledOnItsThread) {
  // linear [0, 100) calls addmm [10, 90), which calls a fill [20, 30); on
  // another thread, at overlapping times, an mm [5, 45) stands alone.
  const std::vector<ProfiledEvent> events = {
      Cpu("aten::linear", 1, 0, 100), Cpu("aten::addmm", 1, 10, 80),
      Cpu("aten::fill_", 1, 20, 10), Cpu("aten::mm", 2, 5, 40),
      Cpu("aten::linear", 1, 200, 60)};  // a second call, leaf
  const ProfileSummary summary = SummarizeProfile(events, /*device=*/false, 2, 1.0);
  ASSERT_NE(Row(summary, "aten::linear"), nullptr);
  EXPECT_EQ(Row(summary, "aten::linear")->calls, 2);
  EXPECT_DOUBLE_EQ(Row(summary, "aten::linear")->self_ms, (20 + 60) / 1000.0);
  EXPECT_DOUBLE_EQ(Row(summary, "aten::addmm")->self_ms, 70 / 1000.0);
  EXPECT_DOUBLE_EQ(Row(summary, "aten::fill_")->self_ms, 10 / 1000.0);
  EXPECT_DOUBLE_EQ(Row(summary, "aten::mm")->self_ms, 40 / 1000.0);
  // Sorted by time, most first; the self times add up to the threads' busy time.
  EXPECT_EQ(summary.rows.front().name, "aten::linear");
  EXPECT_DOUBLE_EQ(summary.total_ms, (100 + 60 + 40) / 1000.0);
  EXPECT_EQ(summary.cpu_operators, 5);
  EXPECT_FALSE(summary.device);
}

TEST(ProfileSummaryTest, DeviceRowsAreKernelsAndIdleIsTheWindowLessTheirUnion) {
  // Two streams; kernels overlap across them in [30, 40).
  const std::vector<ProfiledEvent> events = {
      Cpu("aten::mm", 1, 0, 5), Kernel("gemm_bf16", 7, 10, 30),
      Kernel("elementwise_add", 8, 30, 20), Kernel("gemm_bf16", 7, 60, 30)};
  const ProfileSummary summary =
      SummarizeProfile(events, /*device=*/true, /*steps=*/2, /*wall_ms=*/0.2);
  ASSERT_EQ(summary.rows.size(), 2u);
  EXPECT_EQ(summary.rows[0].name, "gemm_bf16");
  EXPECT_EQ(summary.rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(summary.rows[0].self_ms, 0.06);
  EXPECT_EQ(summary.device_events, 3);
  // Union: [10, 50) and [60, 90) = 70 us of 200.
  EXPECT_DOUBLE_EQ(summary.device_busy_ms, 0.07);
  EXPECT_NEAR(summary.device_idle_ms(), 0.13, 1e-12);

  const std::string table = FormatProfileTable(summary, 1);
  EXPECT_THAT(table, HasSubstr("kernels and copies by device time"));
  EXPECT_THAT(table, HasSubstr("gemm_bf16"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("elementwise_add")));  // top 1 only
  EXPECT_THAT(table, HasSubstr("idle 0.065 ms"));
  EXPECT_THAT(table, HasSubstr("1.5 device events per step"));
}

TEST(ProfileSummaryTest, SummaryAndTraceAreJsonThatToolsRead) {
  const std::vector<ProfiledEvent> events = {Cpu("aten::addmm \"quoted\"", 3, 100, 20),
                                             Kernel("ampere_gemm", 7, 105, 10)};
  const ProfileSummary summary = SummarizeProfile(events, false, 1, 0.5);
  const nlohmann::json parsed = nlohmann::json::parse(ProfileSummaryJson(summary));
  EXPECT_EQ(parsed["kind"], "cpu");
  EXPECT_EQ(parsed["steps"], 1);
  ASSERT_EQ(parsed["rows"].size(), 1u);
  EXPECT_EQ(parsed["rows"][0]["name"], "aten::addmm \"quoted\"");

  const nlohmann::json trace = nlohmann::json::parse(ChromeTraceJson(events));
  ASSERT_EQ(trace["traceEvents"].size(), 2u);
  const nlohmann::json& op = trace["traceEvents"][0];
  EXPECT_EQ(op["ph"], "X");
  EXPECT_EQ(op["pid"], "CPU");
  EXPECT_DOUBLE_EQ(op["ts"].get<double>(), 0.0);    // relative to the first event
  EXPECT_DOUBLE_EQ(op["dur"].get<double>(), 20.0);  // microseconds
  EXPECT_EQ(trace["traceEvents"][1]["pid"], "device");
  EXPECT_DOUBLE_EQ(trace["traceEvents"][1]["ts"].get<double>(), 5.0);
}

}  // namespace
}  // namespace tessera::trainer
