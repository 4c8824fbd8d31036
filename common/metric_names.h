// The names of the metrics a trainer reports that other components treat
// specially. The trainer (worker/trainer/run/trainer.cc) reports an evaluation of
// the test split as "test_accuracy" and "test_loss" at the steps it evaluates;
// everything else (loss, images_per_sec, time_*_ms, ...) is per-interval
// training telemetry.
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COMMON_METRIC_NAMES_H_
#define TESSERA_COMMON_METRIC_NAMES_H_

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tessera {

inline constexpr char kTestAccuracyMetricName[] = "test_accuracy";
inline constexpr char kTestLossMetricName[] = "test_loss";

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

}  // namespace tessera

#endif  // TESSERA_COMMON_METRIC_NAMES_H_
