// The evaluation-only run of one rank (tessera-train --eval-only): no
// optimizer, no gradients, no training data order. It builds the model of the
// run's options, takes its weights from a safetensors file (trainer.init_from;
// vit_weights.h) or from a checkpoint (trainer.resume with checkpoint_dir; the
// latest, or trainer.eval_step), and evaluates one split (trainer.eval_split:
// "test", or "val" for the same held-out split, or "train" without
// augmentation), each rank its share of it (the test sampler the training
// loop uses), with the same preprocessing as the training loop's evaluation,
// in fp32 whatever trainer.precision says (a bf16 or fp16 job's own final
// evaluation ran under autocast, so its figures may differ in the last digits).
// The ranks sum their counts, so every rank gets the same EvalReport
// (eval_report.h); it is reported as metrics at the checkpoint's step.
//
// Everything that can be found wrong is checked before the first batch: a
// missing checkpoint or weights file, a class mapping stored with the weights
// that differs from the data's (naming the first class that differs), and a
// file whose tensors do not fit the model (naming the tensor and both shapes,
// or the head whose class count differs), each failing with a message that
// names what differs.
//
// RunEvaluation runs on the calling thread; its collaborators must outlive it.
#ifndef TESSERA_WORKER_TRAINER_RUN_EVALUATION_H_
#define TESSERA_WORKER_TRAINER_RUN_EVALUATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/run/eval_report.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

// The split trainer.eval_split names: kTest for "test", "val" and empty;
// kTrain for "train". InvalidArgument otherwise.
absl::StatusOr<Split> EvalSplitOf(const std::string& eval_split);

// FailedPrecondition naming the first class whose name differs between the
// weights' mapping (`stored`; `source` says whose, e.g. "the checkpoint's") and
// the data's; OK when `stored` is empty (weights saved without names).
absl::Status CheckClassMapping(const std::string& source,
                               const std::vector<std::string>& stored,
                               const std::vector<std::string>& data);

// Evaluates as described above. Uses loop.eval_batch_size, loop.log,
// loop.progress, loop.local_rank and loop.finish_batches_on_device.
absl::StatusOr<EvalReport> RunEvaluation(const TrainerOptions& options,
                                         const TrainingData& data,
                                         Communicator& communicator,
                                         MetricsReporter& reporter,
                                         const TrainerLoopOptions& loop);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_EVALUATION_H_
