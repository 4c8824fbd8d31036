// Training's evaluation on the test split, after each epoch and at the end of
// a run: each rank runs the model (in eval mode, without gradients, under the
// run's autocast) over its share of the test samples, and the ranks sum their
// correct predictions, summed losses and counts, so that every rank reports
// the accuracy and the mean loss over the whole split. (--eval-only's
// evaluation, with its confusion matrix and top-5, is evaluation.h.)
//
// When a run scores its held-out splits, and how it reports them, is
// HeldOutEvaluation: the test split at each epoch's end and at the run's end
// (test_accuracy, test_loss; also val_accuracy, val_loss where the data's test
// split is its validation split), and the validation split every eval_every
// steps and at the step the run stops (val_accuracy, val_loss).
//
// Use: EvaluateTestSplit with the model and the run's test feed; it reports
// the all-reduce as the "collective" phase, then "eval" again, and each batch
// as an item of the phase. HeldOutEvaluation with a function that scores a
// split that way; Test at each epoch's end, ValidateIfDue after each step.
//
// Thread-safety: the training loop's thread calls them; a collective, so every
// rank calls them at the same points.
#ifndef TESSERA_WORKER_TRAINER_RUN_TEST_EVALUATION_H_
#define TESSERA_WORKER_TRAINER_RUN_TEST_EVALUATION_H_

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/phase_reporter.h"
#include "worker/trainer/run/training_feeds.h"

namespace tessera::trainer {

struct TestEvaluation {
  double accuracy = 0;  // over every rank's samples
  double loss = 0;      // mean cross-entropy
};

struct TestEvaluationOptions {
  int batch_size = 256;  // no gradients, so larger than training's is fine
  c10::Device device = c10::Device(c10::kCPU);  // the model's
  bool autocast = false;                        // forward under CUDA autocast
  at::ScalarType autocast_dtype = at::kBFloat16;
  // The held-out split evaluated: kTest, or kVal (trainer.eval_every and a
  // search's rungs), which the feeds must have.
  Split split = Split::kTest;
};

// Evaluates `model` on this rank's test samples `indices` (from
// feeds.test_loader(), moved by feeds.test()) and sums the counts over the
// ranks. Leaves the model in training mode. A load's or the all-reduce's
// error; FailedPrecondition when the split is empty on every rank.
absl::StatusOr<TestEvaluation> EvaluateTestSplit(VisionTransformer& model,
                                                 const std::vector<int64_t>& indices,
                                                 TrainingFeeds& feeds,
                                                 Communicator& communicator,
                                                 PhaseReporter& phases,
                                                 const TestEvaluationOptions& options);

class HeldOutEvaluation {
 public:
  // Scores `split` (kTest or kVal) over every rank.
  using Score = std::function<absl::StatusOr<TestEvaluation>(Split split)>;
  struct Options {
    bool has_val = false;      // the data has a validation split
    bool test_is_val = false;  // the data's test split is its validation split
    int64_t eval_every = 0;    // validation every N steps; 0: only at the stop
  };

  // `reporter` must outlive the evaluation.
  HeldOutEvaluation(Score score, MetricsReporter& reporter, Options options);

  // Scores the test split at `step` and reports it.
  absl::Status Test(int64_t step);
  // Scores the validation split at `step` and reports it where it is due:
  // every eval_every steps and at `stop_at`, unless Test scored it at this
  // step already (the test split being the validation split).
  absl::Status ValidateIfDue(int64_t step, int64_t stop_at);

  // The step of the last Test, and its figures.
  std::optional<int64_t> tested_at() const { return tested_at_; }
  const TestEvaluation& last_test() const { return last_test_; }

 private:
  const Score score_;
  MetricsReporter& reporter_;  // Not owned.
  const Options options_;
  std::optional<int64_t> tested_at_;
  TestEvaluation last_test_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TEST_EVALUATION_H_
