#include "worker/trainer/run/metrics_reporter.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/trainer/fake_coordinator_client.h"

namespace tessera::trainer {
namespace {

using testing::FakeCoordinatorClient;
using ::testing::HasSubstr;

// Sends only when a batch fills up or on Flush, so tests control delivery.
MetricsReporterOptions QuietOptions() {
  MetricsReporterOptions options;
  options.flush_interval = absl::InfiniteDuration();
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(5);
  return options;
}

std::vector<std::string> Names(const std::vector<MetricSample>& points) {
  std::vector<std::string> names;
  for (const MetricSample& p : points) names.push_back(p.name);
  return names;
}

TEST(MetricsReporterTest, PrintsOneProgressLinePerReport) {
  std::ostringstream progress;
  MetricsReporterOptions options = QuietOptions();
  options.rank = 3;
  options.progress = &progress;
  auto reporter = MetricsReporter::Create(options, nullptr);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(20, {{"loss", 0.5}, {"images_per_sec", 812.25}});
  EXPECT_EQ(progress.str(), "[rank 3] step 20 | loss=0.5 images_per_sec=812.25\n");
}

TEST(MetricsReporterTest, WritesEveryPointAsAJsonLine) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "metrics_reporter_test.jsonl")
          .string();
  MetricsReporterOptions options = QuietOptions();
  options.rank = 1;
  options.metrics_file = path;
  {
    auto reporter = MetricsReporter::Create(options, nullptr);
    ASSERT_TRUE(reporter.ok()) << reporter.status();
    (*reporter)->Report(10, {{"loss", 2.25}, {"epoch", 0.5}});
    (*reporter)->Report(20, {{"loss", 1.0}});
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["rank"], 1);
  EXPECT_EQ(lines[0]["step"], 10);
  EXPECT_EQ(lines[0]["name"], "loss");
  EXPECT_EQ(lines[0]["value"], 2.25);
  EXPECT_GT(lines[0]["unix_ms"].get<int64_t>(), 0);
  EXPECT_EQ(lines[1]["name"], "epoch");
  EXPECT_EQ(lines[2]["step"], 20);
  std::filesystem::remove(path);
}

TEST(MetricsReporterTest, UnwritableMetricsFileIsAnError) {
  MetricsReporterOptions options = QuietOptions();
  options.metrics_file = "/nonexistent-dir/metrics.jsonl";
  EXPECT_EQ(MetricsReporter::Create(options, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(MetricsReporterTest, FlushDeliversEveryPointInOrder) {
  FakeCoordinatorClient coordinator;
  auto reporter = MetricsReporter::Create(QuietOptions(), &coordinator);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(10, {{"loss", 1.5}, {"step_time_ms", 80}});
  (*reporter)->Report(20, {{"loss", 1.25}});
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  const std::vector<MetricSample> received = coordinator.received();
  ASSERT_EQ(received.size(), 3u);
  EXPECT_EQ(Names(received), (std::vector<std::string>{"loss", "step_time_ms", "loss"}));
  EXPECT_EQ(received[0].step, 10);
  EXPECT_EQ(received[2].step, 20);
  EXPECT_EQ(received[2].value, 1.25);
}

TEST(MetricsReporterTest, SendsBatchesOfAtMostMaxBatchPoints) {
  FakeCoordinatorClient coordinator;
  MetricsReporterOptions options = QuietOptions();
  options.max_batch_points = 2;
  auto reporter = MetricsReporter::Create(options, &coordinator);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(1, {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}});
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  EXPECT_EQ(coordinator.batch_sizes(), (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(Names(coordinator.received()),
            (std::vector<std::string>{"a", "b", "c", "d", "e"}));
}

TEST(MetricsReporterTest, KeepsPointsWhileTheCoordinatorFailsAndDeliversThemOnce) {
  FakeCoordinatorClient coordinator;
  coordinator.FailNext(3);
  auto reporter = MetricsReporter::Create(QuietOptions(), &coordinator);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(5, {{"loss", 3}});
  (*reporter)->Report(10, {{"loss", 2}});
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  EXPECT_EQ(coordinator.metric_calls(), 4);  // three failures, then success
  const std::vector<MetricSample> received = coordinator.received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].step, 5);
  EXPECT_EQ(received[1].step, 10);
  EXPECT_EQ((*reporter)->dropped_points(), 0);
}

TEST(MetricsReporterTest, DropsTheOldestPointsBeyondTheCap) {
  FakeCoordinatorClient coordinator;
  MetricsReporterOptions options = QuietOptions();
  options.max_buffered_points = 5;
  auto reporter = MetricsReporter::Create(options, &coordinator);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  for (int step = 1; step <= 8; ++step) (*reporter)->Report(step, {{"loss", 1}});
  EXPECT_EQ((*reporter)->dropped_points(), 3);
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  const std::vector<MetricSample> received = coordinator.received();
  ASSERT_EQ(received.size(), 5u);
  EXPECT_EQ(received.front().step, 4);
  EXPECT_EQ(received.back().step, 8);
}

TEST(MetricsReporterTest, FlushGivesUpWithDeadlineExceededWhileTheCoordinatorIsDown) {
  FakeCoordinatorClient coordinator;
  coordinator.FailAll(true);
  auto reporter = MetricsReporter::Create(QuietOptions(), &coordinator);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(1, {{"loss", 1}});
  const absl::Status flushed = (*reporter)->Flush(absl::Milliseconds(100));
  EXPECT_EQ(flushed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(flushed.message(), HasSubstr("not delivered"));
  EXPECT_GE(coordinator.metric_calls(), 1);

  // The points were kept: once the coordinator is back they arrive.
  coordinator.FailAll(false);
  ASSERT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  EXPECT_EQ(coordinator.received().size(), 1u);
}

TEST(MetricsReporterTest, FlushWithoutCoordinatorSucceedsAtOnce) {
  auto reporter = MetricsReporter::Create(QuietOptions(), nullptr);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  (*reporter)->Report(1, {{"loss", 1}});
  EXPECT_TRUE((*reporter)->Flush(absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace tessera::trainer
