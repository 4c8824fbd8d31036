#include "worker/trainer/run/checkpoint_model.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/trainer/run/checkpoint.h"

namespace tessera::trainer {
namespace {

std::string ShapeString(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

}  // namespace

absl::StatusOr<std::string> FindCheckpointModel(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(checkpoint, ec)) return checkpoint;
  if (!fs::is_directory(checkpoint, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", checkpoint));
  }
  const fs::path direct = fs::path(checkpoint) / "model.pt";
  if (fs::is_regular_file(direct, ec)) return direct.string();
  const CheckpointDirectory dir(checkpoint);
  ASSIGN_OR_RETURN(const std::optional<int64_t> latest, dir.LatestStep());
  if (!latest.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        checkpoint, " holds no checkpoint (neither model.pt nor a `latest` pointer)"));
  }
  return dir.ModelPath(*latest);
}

absl::StatusOr<std::vector<std::string>> LoadCheckpointModel(
    const std::string& model_path, VisionTransformerImpl& model) {
  std::vector<std::string> class_names;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model.named_parameters()) {
    shapes[item.key()] = item.value().sizes().vec();
  }
  try {
    torch::serialize::InputArchive archive;
    const std::vector<torch::Tensor> parameters = model.parameters();
    archive.load_from(model_path, parameters.empty() ? torch::Device(torch::kCPU)
                                                     : parameters.front().device());
    torch::serialize::InputArchive model_archive;
    if (!archive.try_read("model", model_archive)) {
      return absl::DataLossError(absl::StrCat(
          model_path, " is not a Tessera checkpoint model file (no \"model\")"));
    }
    model.load(model_archive);
    // One name a line; absent from checkpoints older than the class names.
    c10::IValue names;
    if (archive.try_read("class_names", names) && names.isString() &&
        !names.toStringRef().empty()) {
      class_names = absl::StrSplit(names.toStringRef(), '\n');
    }
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("cannot read the model of ", model_path, ": ",
                                            e.what_without_backtrace()));
  }
  // The archive replaces each tensor (shape included), so check the shapes.
  for (const auto& item : model.named_parameters()) {
    const std::vector<int64_t>& expected = shapes[item.key()];
    if (item.value().sizes().vec() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          model_path, ": ", item.key(), " has shape ", ShapeString(item.value().sizes()),
          "; the model (from the job's "
          "configuration) needs ",
          ShapeString(expected)));
    }
  }
  return class_names;
}

absl::Status ExportCheckpoint(const std::string& checkpoint, const ViTConfig& config,
                              WeightLayout layout,
                              const std::vector<std::string>& class_names,
                              const std::string& out_path,
                              const std::map<std::string, std::string>& extra_metadata) {
  RETURN_IF_ERROR(ValidateViTConfig(config));
  ASSIGN_OR_RETURN(const std::string model_path, FindCheckpointModel(checkpoint));
  try {
    VisionTransformer model(config);
    ASSIGN_OR_RETURN(const std::vector<std::string> stored,
                     LoadCheckpointModel(model_path, *model));
    return ExportSafetensors(*model, layout, class_names.empty() ? stored : class_names,
                             out_path, extra_metadata);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
  }
}

}  // namespace tessera::trainer
