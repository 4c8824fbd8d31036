// The names of the metrics a trainer reports that other components treat
// specially. The trainer (worker/trainer/run/trainer.cc) reports an evaluation of
// the test split as "test_accuracy" and "test_loss" at the steps it evaluates;
// everything else (loss, images_per_sec, time_*_ms, ...) is per-interval
// training telemetry. The reports (sweeps, searches) name here every metric
// they read, and database retention keeps those (IsKeptMetric).
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COMMON_METRIC_NAMES_H_
#define TESSERA_COMMON_METRIC_NAMES_H_

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/device_figures.h"

namespace tessera {

inline constexpr char kTestAccuracyMetricName[] = "test_accuracy";
inline constexpr char kTestLossMetricName[] = "test_loss";
// The validation split's (trainer.val_fraction), reported every
// trainer.eval_every steps, and the training loss of each interval.
inline constexpr char kValAccuracyMetricName[] = "val_accuracy";
inline constexpr char kValLossMetricName[] = "val_loss";
inline constexpr char kTrainLossMetricName[] = "loss";

// A metric a hyperparameter search may rank its trials by
// (common/search_spec.h), and which way is better.
struct SearchMetric {
  const char* name;
  bool maximize;
};
inline constexpr SearchMetric kSearchMetrics[] = {
    {kValAccuracyMetricName, true},  {kValLossMetricName, false},
    {kTestAccuracyMetricName, true}, {kTestLossMetricName, false},
    {kTrainLossMetricName, false},
};

// Bytes of optimizer state (AdamW/LAMB moments, SGD momentum), of gradient
// buffers and of parameters this rank holds, as the trainer counts them; with
// ZeRO (trainer.zero_stage) they shrink with the world size. Parameters at
// stage 3: the rank's shards plus the most memory its gathered blocks held at
// once (the full-parameter buffers in flight). Reported by every rank with
// its first metrics: the breakdown beside the measured peak (peak_rss_bytes,
// device_figures.h) in the sweep report and the dashboard.
inline constexpr char kOptimizerStateBytesMetricName[] = "optimizer_state_bytes";
inline constexpr char kGradientBytesMetricName[] = "gradient_bytes";
inline constexpr char kParameterBytesMetricName[] = "parameter_bytes";

// Whether `name` is an evaluation result ("test_*", "eval_*" or "val_*"):
// sparse points that a job's history is judged by, which database retention
// keeps every one of when it downsamples.
inline bool IsEvaluationMetric(absl::string_view name) {
  return absl::StartsWith(name, "test_") || absl::StartsWith(name, "eval_") ||
         absl::StartsWith(name, "val_");
}

// The run's figures besides its intervals: each whole epoch's measured time,
// the training time and steps at the run's end, and the run's shape at its
// start. And an interval's mean time per step in the collectives.
inline constexpr char kEpochSecondsMetricName[] = "epoch_seconds";
inline constexpr char kTrainSecondsMetricName[] = "train_seconds";
inline constexpr char kTrainStepsMetricName[] = "train_steps";
inline constexpr char kTotalStepsMetricName[] = "total_steps";
inline constexpr char kStepsPerEpochMetricName[] = "steps_per_epoch";
inline constexpr char kCommTimeMsMetricName[] = "time_comm_ms";

// Every metric the sweep report (coordinator/core/sweep_report.cc) reads from
// a point's job; it refuses to read another. Means over every point of some
// (images/s, the communication share, epoch times), the newest or the
// largest of others.
inline constexpr std::string_view kSweepReportMetricNames[] = {
    kEpochSecondsMetricName,  kTrainSecondsMetricName,   kTrainStepsMetricName,
    kStepsPerEpochMetricName, kCommTimeMsMetricName,     kStepTimeMsFigure,
    kImagesPerSecFigure,      kTestAccuracyMetricName,   kOptimizerStateBytesMetricName,
    kGradientBytesMetricName, kParameterBytesMetricName, kCudaPeakAllocatedFigure,
    kPeakRssFigure,
};
// What a search report reads from each trial's job besides the search's
// metric (one of kSearchMetrics): the trial's length and its validation
// figures.
inline constexpr std::string_view kSearchReportMetricNames[] = {
    kTotalStepsMetricName,
    kValAccuracyMetricName,
    kValLossMetricName,
};

// Whether a report reads `name`: a sweep's or a search's input, or a metric a
// search may rank its trials by.
inline bool IsReportMetric(absl::string_view name) {
  const std::string_view wanted(name.data(), name.size());
  for (std::string_view read : kSweepReportMetricNames) {
    if (wanted == read) return true;
  }
  for (std::string_view read : kSearchReportMetricNames) {
    if (wanted == read) return true;
  }
  for (const SearchMetric& metric : kSearchMetrics) {
    if (wanted == metric.name) return true;
  }
  return false;
}

// Whether database retention keeps every point of `name` whatever the size
// budget (coordinator/store/db_retention.h): an evaluation result or a
// report's input. It thins the other series of a finished job to their last
// point, and drops that only when the database is still over its budget.
inline bool IsKeptMetric(absl::string_view name) {
  return IsEvaluationMetric(name) || IsReportMetric(name);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_METRIC_NAMES_H_
