#include "worker/trainer/run/eval_report.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::trainer {

absl::StatusOr<EvalReport> SummarizeEvalCounts(std::string split, int64_t step,
                                               std::vector<std::string> class_names,
                                               const std::vector<double>& confusion,
                                               double top5_hits, double loss_sum) {
  const size_t k = class_names.size();
  if (k == 0 || confusion.size() != k * k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation counts: ", confusion.size(), " confusion cells for ", k, " classes"));
  }
  EvalReport report;
  report.split = std::move(split);
  report.step = step;
  report.class_accuracy.assign(k, 0.0);
  report.class_samples.assign(k, 0);
  int64_t correct = 0;
  for (size_t row = 0; row < k; ++row) {
    int64_t in_class = 0;
    for (size_t col = 0; col < k; ++col) {
      in_class += std::llround(confusion[row * k + col]);
    }
    const int64_t hits = std::llround(confusion[row * k + row]);
    report.class_samples[row] = in_class;
    if (in_class > 0) {
      report.class_accuracy[row] =
          static_cast<double>(hits) / static_cast<double>(in_class);
    }
    report.samples += in_class;
    correct += hits;
  }
  if (report.samples == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", report.split, " split has no samples to evaluate"));
  }
  const auto n = static_cast<double>(report.samples);
  report.top1 = static_cast<double>(correct) / n;
  report.top5 = top5_hits / n;
  report.loss = loss_sum / n;
  if (k <= static_cast<size_t>(kMaxConfusionClasses)) {
    report.confusion.reserve(k * k);
    for (double cell : confusion) report.confusion.push_back(std::llround(cell));
  }
  report.class_names = std::move(class_names);
  return report;
}

std::vector<std::pair<std::string, double>> EvalScalarMetrics(const EvalReport& report) {
  return {{"eval_top1", report.top1},
          {"eval_top5", report.top5},
          {"eval_loss", report.loss},
          {"eval_samples", static_cast<double>(report.samples)}};
}

std::string FormatEvalReport(const EvalReport& report, int max_classes) {
  std::string out = absl::StrFormat(
      "eval on %s (%d samples%s): top1=%.4f top5=%.4f loss=%.4f\n", report.split,
      report.samples, report.step > 0 ? absl::StrCat(", step ", report.step) : "",
      report.top1, report.top5, report.loss);
  const int k = static_cast<int>(report.class_names.size());
  for (int c = 0; c < k && c < max_classes; ++c) {
    absl::StrAppendFormat(&out, "  class %d %s: %.4f of %d\n", c, report.class_names[c],
                          report.class_accuracy[c], report.class_samples[c]);
  }
  if (k > max_classes) absl::StrAppend(&out, "  (", k - max_classes, " more classes)\n");
  return out;
}

}  // namespace tessera::trainer
