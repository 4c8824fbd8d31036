// `tessctl export JOB`: the job's trained model as a safetensors file that
// PyTorch loads, with timm, Hugging Face or torchvision parameter names.
//
//   tessctl export 12 --names timm -o pets-vit.safetensors
//
// tessctl asks the coordinator for the job's spec (model, image size, dataset
// and checkpoint directory) and runs tessera-export, the trainer-side exporter
// that reads LibTorch checkpoints (so tessctl itself links no LibTorch), on
// that directory. The checkpoints are read from this machine's file system:
// the shared directory the job wrote (trainer.checkpoint_dir), or --checkpoint
// where it is mounted elsewhere. Reading them needs the file permissions of
// whoever runs tessctl, as for any file.
#ifndef TESSERA_CLI_EXPORT_COMMAND_H_
#define TESSERA_CLI_EXPORT_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

struct ExportOptions {
  int64_t job_id = 0;
  std::string names = "torchvision";  // timm | hf | torchvision | tessera
  std::string out;                    // the safetensors file to write
  int64_t step = 0;                   // 0: the latest published checkpoint
  std::string checkpoint;             // empty: the spec's trainer.checkpoint_dir
  std::string exporter;               // empty: tessera-export beside tessctl, then $PATH
};

// The tessera-export argument vector (argv[0] = `exporter`) for `job`.
// FailedPrecondition when the job wrote no checkpoints (no checkpoint_dir and
// no --checkpoint).
absl::StatusOr<std::vector<std::string>> ExportCommand(const v1::Job& job,
                                                       const ExportOptions& options,
                                                       const std::string& exporter);

// Where tessera-export is: `options.exporter`, else beside the running
// binary, else the first on $PATH. NotFound naming the places tried.
absl::StatusOr<std::string> FindExporter(const ExportOptions& options);

// Runs the exporter as a child with this process's stdout and stderr and
// returns its exit code (1 when it could not run or was killed).
int RunExport(const ExportOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_EXPORT_COMMAND_H_
