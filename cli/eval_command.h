// `tessctl eval`: submits a job of kind "eval" that evaluates a trained model
// on one split (tessera-train --eval-only; docs/guide.md, evaluating a model). It
// runs on a worker like any other job: it has an owner, counts against the
// quota and takes a GPU where the spec's device asks for one.
//
//   tessctl eval 12                      the latest checkpoint of job 12 on its data
//   tessctl eval 12 --step 3000 --data /data/pets-v2 --split val
//   tessctl eval --from vit.safetensors --model vit-ti16 --data /data/pets
//   tessctl eval --from vit.safetensors ... --set trainer.crop_fraction=1
//
// For a job, the eval job's spec is the job's own (model, data, image size,
// normalisation, checkpoint directory) with trainer.eval_only, resume and the
// chosen step, split and data set, as `tessctl submit --set` would set them;
// with --from it is a spec of its own, and the trainer takes the preprocessing
// that comes with the file (its metadata, config.json beside it) for the keys
// the spec leaves unset (worker/trainer/run/weights_preprocessing.h). `--set
// trainer.KEY=VALUE` sets the data's preprocessing keys (kEvalSetKeys) over
// both. Either spec is validated here and again by the coordinator. Results:
// `tessctl status JOB -o json` (.eval) and the job page.
#ifndef TESSERA_CLI_EVAL_COMMAND_H_
#define TESSERA_CLI_EVAL_COMMAND_H_

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

struct EvalOptions {
  int64_t job_id = 0;  // evaluate this job's checkpoint (0: --from)
  int64_t step = 0;    // its checkpoint of this step (0: the latest)
  std::string from;    // or: a safetensors file (under the workers' data roots)
  std::string model;   // with --from: the model preset
  std::string dataset = "imagefolder";  // with --from: the data's kind
  std::string names = "auto";           // with --from: its parameter names
  std::string data_dir;                 // empty: the job's (required with --from)
  std::string split;                    // test | val | train; empty: the trainer's (test)
  int32_t image_size = 0;  // with --from: the model's input size (0: the preset's)
  int32_t world_size = 1;  // ranks that share the split
  std::string device;      // auto | cpu | cuda; empty: the job's (auto)
  std::string name;        // empty: "<job name>-eval" or "eval-<file stem>"
  // --set trainer.KEY=VALUE of the keys in kEvalSetKeys, applied last.
  std::vector<std::string> overrides;
  SubmitOptions submit;  // retries and --follow
};

// The trainer keys `tessctl eval --set` takes: the data's preprocessing.
inline constexpr std::array<std::string_view, 5> kEvalSetKeys = {
    "crop_fraction", "mean", "std", "image_size", "interpolation"};

// The eval job's spec as YAML, for the job `source` (null with --from).
// InvalidArgument naming what is missing or contradictory (--from with a job,
// --from without --model or --data, --step without a job, a --set of a key
// outside kEvalSetKeys).
absl::StatusOr<std::string> EvalSpecYaml(const EvalOptions& options,
                                         const v1::Job* source);

int RunEval(const EvalOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_EVAL_COMMAND_H_
