// What an evaluation-only run (tessera-train --eval-only; evaluation.h)
// measured over one whole split: top-1, top-5 and mean loss, per-class
// accuracy and the confusion matrix. The run sums raw counts over its ranks
// and SummarizeEvalCounts turns them into this report, which goes to the log,
// the metrics (eval_top1, eval_top5, eval_loss, eval_samples) and the
// coordinator (tessera.v1.EvalResult, through TrainingResult::eval).
//
// Plain struct and pure functions: thread-compatible; no LibTorch.
#ifndef TESSERA_WORKER_TRAINER_RUN_EVAL_REPORT_H_
#define TESSERA_WORKER_TRAINER_RUN_EVAL_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer {

// Above this many classes the report keeps the per-class lists but not the
// confusion matrix (classes^2 counts: 10,000 at 100 classes).
inline constexpr int kMaxConfusionClasses = 100;

struct EvalReport {
  std::string split;  // "test" or "train"
  int64_t step = 0;   // the checkpoint's step; 0 for a weights file
  int64_t samples = 0;
  double top1 = 0;
  double top5 = 0;  // top-min(5, classes)
  double loss = 0;  // mean cross-entropy
  std::vector<std::string> class_names;
  std::vector<double> class_accuracy;  // 0 for a class without samples
  std::vector<int64_t> class_samples;
  // Row-major classes x classes: row = true class, column = prediction.
  // Empty above kMaxConfusionClasses.
  std::vector<int64_t> confusion;
};

// The report from counts summed over every rank: `confusion` holds
// classes x classes counts (row = true class), `top5_hits` the samples whose
// label was among the top min(5, classes) logits, `loss_sum` the summed
// cross-entropy. FailedPrecondition when there are no samples;
// InvalidArgument when the sizes disagree.
absl::StatusOr<EvalReport> SummarizeEvalCounts(std::string split, int64_t step,
                                               std::vector<std::string> class_names,
                                               const std::vector<double>& confusion,
                                               double top5_hits, double loss_sum);

// The scalar metrics of a report: eval_top1, eval_top5, eval_loss, eval_samples.
std::vector<std::pair<std::string, double>> EvalScalarMetrics(const EvalReport& report);

// A few lines for the job log: the totals, then one line per class (at most
// `max_classes`, then a count of the rest).
std::string FormatEvalReport(const EvalReport& report, int max_classes = 20);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_EVAL_REPORT_H_
