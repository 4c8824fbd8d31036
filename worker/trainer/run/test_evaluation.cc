#include "worker/trainer/run/test_evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/metric_names.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "worker/trainer/model/autocast_scope.h"

namespace tessera::trainer {

absl::StatusOr<TestEvaluation> EvaluateTestSplit(VisionTransformer& model,
                                                 const std::vector<int64_t>& indices,
                                                 TrainingFeeds& feeds,
                                                 Communicator& communicator,
                                                 PhaseReporter& phases,
                                                 const TestEvaluationOptions& options) {
  const SampleLoader* loader = feeds.held_out_loader(options.split);
  if (loader == nullptr) {
    return absl::FailedPreconditionError("the data has no validation split");
  }
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor correct =
      torch::zeros({}, torch::TensorOptions(options.device).dtype(torch::kDouble));
  torch::Tensor loss_sum = torch::zeros_like(correct);
  const auto n = static_cast<int64_t>(indices.size());
  for (int64_t begin = 0; begin < n; begin += options.batch_size) {
    const int64_t end = std::min(n, begin + options.batch_size);
    ASSIGN_OR_RETURN(const Batch loaded, loader->Load(indices, begin, end, 0));
    const Batch batch = feeds.test().ToDevice(loaded);
    torch::Tensor logits;
    {
      AutocastScope mixed(options.autocast, options.autocast_dtype);
      logits = model->forward(batch.images).to(torch::kFloat);
    }
    loss_sum.add_(torch::nn::functional::cross_entropy(
        logits, batch.labels,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
    correct.add_(logits.argmax(1).eq(batch.labels).sum());
    phases.AddPhaseItem();
  }
  model->train();
  // Summed over ranks whether or not gradients are: every rank reports the
  // accuracy over the whole test set.
  torch::Tensor totals = torch::stack(
      {correct, loss_sum, torch::full({}, static_cast<double>(n), correct.options())});
  phases.Report(RankPhase::kCollective);
  RETURN_IF_ERROR(communicator.AllReduceSum(totals));
  phases.Report(RankPhase::kEval);
  const torch::Tensor host = phases.ReadFromDevice([&] { return totals.cpu(); });
  const double count = host[2].item<double>();
  if (count <= 0) {
    return absl::FailedPreconditionError(options.split == Split::kVal
                                             ? "the validation split is empty"
                                             : "the test set is empty");
  }
  return TestEvaluation{host[0].item<double>() / count, host[1].item<double>() / count};
}

HeldOutEvaluation::HeldOutEvaluation(Score score, MetricsReporter& reporter,
                                     Options options)
    : score_(std::move(score)), reporter_(reporter), options_(options) {}

absl::Status HeldOutEvaluation::Test(int64_t step) {
  ASSIGN_OR_RETURN(last_test_, score_(Split::kTest));
  tested_at_ = step;
  std::vector<std::pair<std::string, double>> values = {
      {"test_accuracy", last_test_.accuracy}, {"test_loss", last_test_.loss}};
  if (options_.test_is_val) {
    values.emplace_back(kValAccuracyMetricName, last_test_.accuracy);
    values.emplace_back(kValLossMetricName, last_test_.loss);
  }
  reporter_.Report(step, values);
  return absl::OkStatus();
}

absl::Status HeldOutEvaluation::ValidateIfDue(int64_t step, int64_t stop_at) {
  if (!options_.has_val) return absl::OkStatus();
  const bool due =
      (options_.eval_every > 0 && step % options_.eval_every == 0) || step == stop_at;
  // Where the test split is the validation split, the test evaluation at
  // this step has scored it already.
  if (!due || (options_.test_is_val && tested_at_ == step)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TestEvaluation val, score_(Split::kVal));
  reporter_.Report(
      step, {{kValAccuracyMetricName, val.accuracy}, {kValLossMetricName, val.loss}});
  return absl::OkStatus();
}

}  // namespace tessera::trainer
