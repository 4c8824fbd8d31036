#include "worker/trainer/run/eval_report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(EvalReportTest, SummarizesTopOneAndPerClassAccuracyFromTheConfusionCounts) {
  // Row = true class: class a 3 of 4 right, class b 1 of 2, class c none.
  const std::vector<double> confusion = {3, 1, 0,  //
                                         1, 1, 0,  //
                                         0, 0, 0};
  const absl::StatusOr<EvalReport> report =
      SummarizeEvalCounts("test", 12, {"a", "b", "c"}, confusion, 5, 3.0);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->samples, 6);
  EXPECT_DOUBLE_EQ(report->top1, 4.0 / 6);
  EXPECT_DOUBLE_EQ(report->top5, 5.0 / 6);
  EXPECT_DOUBLE_EQ(report->loss, 0.5);
  EXPECT_EQ(report->step, 12);
  EXPECT_THAT(report->class_accuracy, ElementsAre(0.75, 0.5, 0.0));
  EXPECT_THAT(report->class_samples, ElementsAre(4, 2, 0));
  EXPECT_THAT(report->confusion, ElementsAre(3, 1, 0, 1, 1, 0, 0, 0, 0));
}

TEST(EvalReportTest, KeepsPerClassFiguresButNoConfusionMatrixAboveTheBound) {
  const int k = kMaxConfusionClasses + 1;
  std::vector<std::string> names(k, "x");
  std::vector<double> confusion(static_cast<size_t>(k) * k, 0.0);
  for (int c = 0; c < k; ++c) confusion[static_cast<size_t>(c) * k + c] = 1;
  const absl::StatusOr<EvalReport> report =
      SummarizeEvalCounts("train", 0, names, confusion, k, 0.0);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->confusion.empty());
  EXPECT_EQ(report->class_accuracy.size(), static_cast<size_t>(k));
  EXPECT_DOUBLE_EQ(report->top1, 1.0);
}

TEST(EvalReportTest, AnEmptySplitOrMismatchedCountsAreErrors) {
  EXPECT_EQ(
      SummarizeEvalCounts("test", 0, {"a", "b"}, {0, 0, 0, 0}, 0, 0).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SummarizeEvalCounts("test", 0, {"a", "b"}, {1, 0, 0}, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EvalReportTest, ScalarMetricsAndLogLinesNameTheFigures) {
  const absl::StatusOr<EvalReport> report =
      SummarizeEvalCounts("val", 0, {"cat", "dog"}, {1, 0, 1, 2}, 4, 2.0);
  ASSERT_TRUE(report.ok());
  const auto metrics = EvalScalarMetrics(*report);
  ASSERT_EQ(metrics.size(), 4u);
  EXPECT_EQ(metrics[0].first, "eval_top1");
  EXPECT_DOUBLE_EQ(metrics[0].second, 0.75);
  EXPECT_EQ(metrics[3].first, "eval_samples");
  EXPECT_DOUBLE_EQ(metrics[3].second, 4);
  const std::string text = FormatEvalReport(*report);
  EXPECT_THAT(text, HasSubstr("top1=0.7500"));
  EXPECT_THAT(text, HasSubstr("class 1 dog: 0.6667 of 3"));
}

}  // namespace
}  // namespace tessera::trainer
