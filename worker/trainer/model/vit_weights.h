// Pretrained weights in and trained weights out: Tessera's ViT (vit.h) against
// safetensors files (safetensors.h) that use the parameter names of timm, Hugging
// Face transformers or torchvision, or Tessera's own.
//
//   LoadPretrained     copies every tensor of a file into a model: the names are
//                      mapped, Hugging Face's separate query/key/value become one
//                      qkv, the position embedding is resampled to the model's
//                      patch grid, and a head whose class count differs is left as
//                      the model initialised it. Nothing is copied unless the
//                      whole file fits.
//   ExportSafetensors  writes a model with the names of the chosen layout, the
//                      class names and the model's shape in __metadata__.
//   LayerDecayParameterGroups, IsHeadParameter
//                      the hooks of the usual fine-tuning recipes: layer-wise
//                      learning-rate decay and a head-only warm-up.
//
// The name maps are in docs/pretrained.md. LibTorch types appear here only as
// forward declarations. Functions are thread-compatible: a model is used by one
// thread at a time; the free functions over names have no shared state.
#ifndef TESSERA_WORKER_TRAINER_MODEL_VIT_WEIGHTS_H_
#define TESSERA_WORKER_TRAINER_MODEL_VIT_WEIGHTS_H_

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/model/vit_config.h"

namespace at {
class Tensor;
}  // namespace at

namespace tessera::trainer {

class VisionTransformerImpl;

// Whose parameter names a file uses.
enum class WeightLayout {
  kTessera,      // Tessera's own (VisionTransformer's named_parameters)
  kTimm,         // timm's VisionTransformer (vit_base_patch16_224, ...)
  kHuggingFace,  // transformers' ViTForImageClassification ("vit." prefix; a bare
                 // ViTModel without it is read too)
  kTorchvision,  // torchvision.models.VisionTransformer (vit_b_16, ...)
};

// "tessera", "timm", "hf" (or "huggingface"), "torchvision"; InvalidArgument
// listing those for anything else.
absl::StatusOr<WeightLayout> ParseWeightLayout(absl::string_view name);
// "tessera", "timm", "hf", "torchvision".
absl::string_view WeightLayoutName(WeightLayout layout);

// What a layout's pretrained models expect besides the weights.
struct LayoutConventions {
  // LayerNorm epsilon of the source's models: timm 1e-6, torchvision 1e-6,
  // Hugging Face 1e-12 (ViTConfig.layer_norm_eps). Build the model with it
  // (ViTConfig::layer_norm_eps) before loading.
  double layer_norm_eps = 1e-6;
  // Input normalisation, per RGB channel, of the published checkpoints: timm's
  // ViTs (augreg) and Google's ViTs on the Hugging Face hub (their
  // preprocessor_config.json) use 0.5 / 0.5; torchvision's vit_b_16 weights
  // use ImageNet's mean and std. Tessera's own: 0.5 / 0.5 as a neutral default
  // (the training job's own normalisation is what counts).
  std::array<double, 3> mean = {0.5, 0.5, 0.5};
  std::array<double, 3> std = {0.5, 0.5, 0.5};
};
LayoutConventions ConventionsOf(WeightLayout layout);

// The layout whose marker tensors (patch projection or position embedding)
// `names` hold; InvalidArgument when none or more than one matches.
absl::StatusOr<WeightLayout> DetectWeightLayout(const std::vector<std::string>& names);

// One Tessera parameter and the tensor(s) holding it in a layout: one name, or
// for Hugging Face's attention three (query, key, value), concatenated along
// dimension 0.
struct NameMapping {
  std::string tessera;
  std::vector<std::string> source;
};
// Every parameter of a ViT with `depth` blocks, in the model's registration
// order (embeddings, blocks, norm, head).
std::vector<NameMapping> WeightNameMap(WeightLayout layout, int depth);

struct PretrainedOptions {
  // The file's layout; nullopt detects it from the names (DetectWeightLayout).
  std::optional<WeightLayout> layout;
  // Limits on the file (its header size).
  SafetensorsFile::Options file;
};

// What LoadPretrained did, by Tessera parameter name.
struct PretrainedSummary {
  WeightLayout layout = WeightLayout::kTessera;
  std::vector<std::string> loaded;              // copied unchanged
  std::vector<std::string> resampled;           // the position embedding, resampled
  std::vector<std::string> reinitialised;       // the head, when its classes differ or
                                                // the file has none: left as initialised
  std::vector<std::string> unused;              // file tensors no parameter takes
  std::map<std::string, std::string> metadata;  // the file's __metadata__
  // Notes worth logging, e.g. a LayerNorm epsilon that differs from the
  // layout's convention.
  std::vector<std::string> notes;

  // One line per category, for the job log.
  std::string ToString() const;
};

// Loads the safetensors file at `path` (or an open one) into `model`. Errors:
// InvalidArgument when the file does not fit the model: missing tensors (all
// listed), a shape that cannot be used (naming the tensor and both shapes), a
// different number of blocks, a non-floating dtype; those of SafetensorsFile
// for a malformed file. On error the model is unchanged.
absl::StatusOr<PretrainedSummary> LoadPretrained(VisionTransformerImpl& model,
                                                 const std::string& path,
                                                 const PretrainedOptions& options = {});
absl::StatusOr<PretrainedSummary> LoadPretrained(VisionTransformerImpl& model,
                                                 const SafetensorsFile& file,
                                                 const PretrainedOptions& options = {});

// A position embedding [1, prefix_tokens + h*w, dim] on a square grid resampled
// to [1, prefix_tokens + grid_height*grid_width, dim] as timm's
// resample_abs_pos_embed does: the prefix (class token) rows kept apart, the grid
// interpolated bicubically (align_corners=false, no antialiasing) in float32.
// InvalidArgument when the tokens after the prefix do not form a square grid.
absl::StatusOr<at::Tensor> ResamplePositionEmbedding(const at::Tensor& embedding,
                                                     int grid_height, int grid_width,
                                                     int prefix_tokens = 1);

// Writes `model`'s parameters (float32) with `layout`'s names to `path`
// (atomically). __metadata__ holds "format": "pt" (which Hugging Face's loaders
// want), "layout", "class_names" (a JSON array, possibly empty) and
// "vit_config" (a JSON object: image_size, patch_size, in_channels,
// num_classes, dim, depth, heads, mlp_dim, layer_norm_eps), and the entries
// of `extra_metadata` (the export's "pretrained_cfg": the job's
// preprocessing, run/weights_preprocessing.h). InvalidArgument when
// class_names is neither empty nor one per class.
absl::Status ExportSafetensors(
    const VisionTransformerImpl& model, WeightLayout layout,
    const std::vector<std::string>& class_names, const std::string& path,
    const std::map<std::string, std::string>& extra_metadata = {});

// Layer-wise learning-rate decay (BEiT / MAE fine-tuning): the layer of a
// Tessera parameter name is 0 for the embeddings (patch_embedding, class_token,
// position_embedding), i + 1 for blocks.i, and depth + 1 for the final norm and
// the head; its learning rate is scaled by decay^(depth + 1 - layer).
int ParameterLayerId(absl::string_view name, int depth);

struct ParameterGroup {
  int layer_id = 0;
  double lr_scale = 1.0;
  // False for biases, LayerNorm weights (every 1-D tensor), the class token and
  // the position embedding, which these recipes keep out of weight decay.
  bool weight_decay = true;
  // Head parameters (IsHeadParameter) only: the groups a head-only warm-up
  // trains, apart from the final norm of the same layer.
  bool head = false;
  std::vector<std::string> names;  // Tessera parameter names, in model order
};
// The model's parameters grouped by (layer, weight decay, head), in layer
// order; the caller maps the names to tensors through named_parameters() and
// builds one optimizer group per entry with lr * lr_scale (and keeps the scales:
// a schedule that sets every group's lr must multiply by them). The weight-decay
// split is the trainer's usual one, so decay 1.0 changes nothing but grouping.
std::vector<ParameterGroup> LayerDecayParameterGroups(const VisionTransformerImpl& model,
                                                      double decay);

// Whether `name` is a head parameter: the only ones a head-only warm-up trains.
bool IsHeadParameter(absl::string_view name);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_VIT_WEIGHTS_H_
