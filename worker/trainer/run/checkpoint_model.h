// The model of a Tessera checkpoint (run/checkpoint.h) as a ViT: finding its
// model.pt, reading it into a model of the job's shape, and exporting it as
// safetensors in another library's names (model/vit_weights.h).
#ifndef TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_MODEL_H_
#define TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_MODEL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"

namespace tessera::trainer {

// The model file of a Tessera checkpoint: `checkpoint` is a checkpoint
// directory (its `latest` checkpoint), a step directory, or a model.pt file.
// NotFound when there is none.
absl::StatusOr<std::string> FindCheckpointModel(const std::string& checkpoint);

// Reads the model of a checkpoint's model.pt (checkpoint.h) into `model`, which
// must have the shape that wrote it (InvalidArgument naming the first tensor
// that differs otherwise; DataLoss for an unreadable file). Returns the class
// names stored with it (empty when the checkpoint has none).
absl::StatusOr<std::vector<std::string>> LoadCheckpointModel(
    const std::string& model_path, VisionTransformerImpl& model);

// FindCheckpointModel + LoadCheckpointModel into a model built from `config`
// (the job's resolved ViTConfig) + ExportSafetensors: what `tessctl export` and
// `tessera-train export` run. Empty `class_names` exports the checkpoint's own;
// `extra_metadata` goes into the file's metadata too.
absl::Status ExportCheckpoint(
    const std::string& checkpoint, const ViTConfig& config, WeightLayout layout,
    const std::vector<std::string>& class_names, const std::string& out_path,
    const std::map<std::string, std::string>& extra_metadata = {});

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_MODEL_H_
