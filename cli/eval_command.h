// `tessctl eval`: submits a job of kind "eval" that evaluates a trained model
// on one split (tessera-train --eval-only; docs/guide.md, evaluating a model). It
// runs on a worker like any other job: it has an owner, counts against the
// quota and takes a GPU where the spec's device asks for one.
//
//   tessctl eval 12                      the latest checkpoint of job 12 on its data
//   tessctl eval 12 --step 3000 --data /data/pets-v2 --split val
//   tessctl eval --from vit.safetensors --model vit-ti16 --data /data/pets
//
// For a job, the eval job's spec is the job's own (model, data, image size,
// normalisation, checkpoint directory) with trainer.eval_only, resume and the
// chosen step, split and data set, as `tessctl submit --set` would set them;
// with --from it is a spec of its own. Either is validated here and again by
// the coordinator. Results: `tessctl status JOB -o json` (ranks[0].eval) and
// the job page.
#ifndef TESSERA_CLI_EVAL_COMMAND_H_
#define TESSERA_CLI_EVAL_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
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
  SubmitOptions submit;    // retries and --follow
};

// The eval job's spec as YAML, for the job `source` (null with --from).
// InvalidArgument naming what is missing or contradictory (--from with a job,
// --from without --model or --data, --step without a job).
absl::StatusOr<std::string> EvalSpecYaml(const EvalOptions& options,
                                         const v1::Job* source);

int RunEval(const EvalOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_EVAL_COMMAND_H_
