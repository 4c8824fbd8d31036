#include "worker/trainer/model/vit_weights.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/trainer/model/vit.h"

namespace tessera::trainer {
// A named namespace (not only an anonymous one): this file is compiled in unity
// batches with the other trainer files, whose anonymous helpers would clash.
namespace vit_weights_internal {
namespace {

// Tessera name suffix -> the layout's name suffix, within the embeddings /
// final norm / head ("top") or within one block.
struct SuffixMap {
  absl::string_view tessera;
  std::vector<absl::string_view> source;
};

// clang-format off
const std::vector<SuffixMap>& TopMap(WeightLayout layout) {
  static const auto* const kTessera = new std::vector<SuffixMap>{
      {"class_token", {"class_token"}},
      {"position_embedding", {"position_embedding"}},
      {"patch_embedding.weight", {"patch_embedding.weight"}},
      {"patch_embedding.bias", {"patch_embedding.bias"}}};
  static const auto* const kTimm = new std::vector<SuffixMap>{
      {"class_token", {"cls_token"}},
      {"position_embedding", {"pos_embed"}},
      {"patch_embedding.weight", {"patch_embed.proj.weight"}},
      {"patch_embedding.bias", {"patch_embed.proj.bias"}}};
  // Relative to the "vit." prefix (absent in a bare ViTModel).
  static const auto* const kHf = new std::vector<SuffixMap>{
      {"class_token", {"embeddings.cls_token"}},
      {"position_embedding", {"embeddings.position_embeddings"}},
      {"patch_embedding.weight", {"embeddings.patch_embeddings.projection.weight"}},
      {"patch_embedding.bias", {"embeddings.patch_embeddings.projection.bias"}}};
  static const auto* const kTorchvision = new std::vector<SuffixMap>{
      {"class_token", {"class_token"}},
      {"position_embedding", {"encoder.pos_embedding"}},
      {"patch_embedding.weight", {"conv_proj.weight"}},
      {"patch_embedding.bias", {"conv_proj.bias"}}};
  switch (layout) {
    case WeightLayout::kTimm: return *kTimm;
    case WeightLayout::kHuggingFace: return *kHf;
    case WeightLayout::kTorchvision: return *kTorchvision;
    case WeightLayout::kTessera: break;
  }
  return *kTessera;
}

// The final norm and the head: in the layout's namespace like TopMap, except
// Hugging Face's classifier, which sits outside "vit.".
const std::vector<SuffixMap>& TailMap(WeightLayout layout) {
  static const auto* const kTessera = new std::vector<SuffixMap>{
      {"norm.weight", {"norm.weight"}}, {"norm.bias", {"norm.bias"}},
      {"head.weight", {"head.weight"}}, {"head.bias", {"head.bias"}}};
  static const auto* const kHf = new std::vector<SuffixMap>{
      {"norm.weight", {"layernorm.weight"}}, {"norm.bias", {"layernorm.bias"}},
      {"head.weight", {"classifier.weight"}}, {"head.bias", {"classifier.bias"}}};
  static const auto* const kTorchvision = new std::vector<SuffixMap>{
      {"norm.weight", {"encoder.ln.weight"}}, {"norm.bias", {"encoder.ln.bias"}},
      {"head.weight", {"heads.head.weight"}}, {"head.bias", {"heads.head.bias"}}};
  switch (layout) {
    case WeightLayout::kHuggingFace: return *kHf;
    case WeightLayout::kTorchvision: return *kTorchvision;
    case WeightLayout::kTimm:  // timm's names are Tessera's here
    case WeightLayout::kTessera: break;
  }
  return *kTessera;
}

const std::vector<SuffixMap>& BlockMap(WeightLayout layout) {
  static const auto* const kTessera = new std::vector<SuffixMap>{
      {"norm1.weight", {"norm1.weight"}}, {"norm1.bias", {"norm1.bias"}},
      {"attention.qkv.weight", {"attention.qkv.weight"}},
      {"attention.qkv.bias", {"attention.qkv.bias"}},
      {"attention.proj.weight", {"attention.proj.weight"}},
      {"attention.proj.bias", {"attention.proj.bias"}},
      {"norm2.weight", {"norm2.weight"}}, {"norm2.bias", {"norm2.bias"}},
      {"fc1.weight", {"fc1.weight"}}, {"fc1.bias", {"fc1.bias"}},
      {"fc2.weight", {"fc2.weight"}}, {"fc2.bias", {"fc2.bias"}}};
  static const auto* const kTimm = new std::vector<SuffixMap>{
      {"norm1.weight", {"norm1.weight"}}, {"norm1.bias", {"norm1.bias"}},
      {"attention.qkv.weight", {"attn.qkv.weight"}},
      {"attention.qkv.bias", {"attn.qkv.bias"}},
      {"attention.proj.weight", {"attn.proj.weight"}},
      {"attention.proj.bias", {"attn.proj.bias"}},
      {"norm2.weight", {"norm2.weight"}}, {"norm2.bias", {"norm2.bias"}},
      {"fc1.weight", {"mlp.fc1.weight"}}, {"fc1.bias", {"mlp.fc1.bias"}},
      {"fc2.weight", {"mlp.fc2.weight"}}, {"fc2.bias", {"mlp.fc2.bias"}}};
  static const auto* const kHf = new std::vector<SuffixMap>{
      {"norm1.weight", {"layernorm_before.weight"}},
      {"norm1.bias", {"layernorm_before.bias"}},
      {"attention.qkv.weight", {"attention.attention.query.weight",
                                "attention.attention.key.weight",
                                "attention.attention.value.weight"}},
      {"attention.qkv.bias", {"attention.attention.query.bias",
                              "attention.attention.key.bias",
                              "attention.attention.value.bias"}},
      {"attention.proj.weight", {"attention.output.dense.weight"}},
      {"attention.proj.bias", {"attention.output.dense.bias"}},
      {"norm2.weight", {"layernorm_after.weight"}},
      {"norm2.bias", {"layernorm_after.bias"}},
      {"fc1.weight", {"intermediate.dense.weight"}},
      {"fc1.bias", {"intermediate.dense.bias"}},
      {"fc2.weight", {"output.dense.weight"}}, {"fc2.bias", {"output.dense.bias"}}};
  static const auto* const kTorchvision = new std::vector<SuffixMap>{
      {"norm1.weight", {"ln_1.weight"}}, {"norm1.bias", {"ln_1.bias"}},
      {"attention.qkv.weight", {"self_attention.in_proj_weight"}},
      {"attention.qkv.bias", {"self_attention.in_proj_bias"}},
      {"attention.proj.weight", {"self_attention.out_proj.weight"}},
      {"attention.proj.bias", {"self_attention.out_proj.bias"}},
      {"norm2.weight", {"ln_2.weight"}}, {"norm2.bias", {"ln_2.bias"}},
      {"fc1.weight", {"mlp.0.weight"}}, {"fc1.bias", {"mlp.0.bias"}},
      {"fc2.weight", {"mlp.3.weight"}}, {"fc2.bias", {"mlp.3.bias"}}};
  switch (layout) {
    case WeightLayout::kTimm: return *kTimm;
    case WeightLayout::kHuggingFace: return *kHf;
    case WeightLayout::kTorchvision: return *kTorchvision;
    case WeightLayout::kTessera: break;
  }
  return *kTessera;
}
// clang-format on

std::string BlockPrefix(WeightLayout layout, int block, absl::string_view hf_prefix) {
  switch (layout) {
    case WeightLayout::kHuggingFace:
      return absl::StrCat(hf_prefix, "encoder.layer.", block, ".");
    case WeightLayout::kTorchvision:
      return absl::StrCat("encoder.layers.encoder_layer_", block, ".");
    case WeightLayout::kTimm:
    case WeightLayout::kTessera:
      break;
  }
  return absl::StrCat("blocks.", block, ".");
}

NameMapping Prefixed(const SuffixMap& entry, absl::string_view tessera_prefix,
                     absl::string_view source_prefix) {
  NameMapping mapping;
  mapping.tessera = absl::StrCat(tessera_prefix, entry.tessera);
  for (const absl::string_view source : entry.source) {
    mapping.source.push_back(absl::StrCat(source_prefix, source));
  }
  return mapping;
}

std::vector<NameMapping> BlockMappings(WeightLayout layout, int block,
                                       absl::string_view hf_prefix) {
  std::vector<NameMapping> out;
  const std::string tessera_prefix = absl::StrCat("blocks.", block, ".");
  const std::string source_prefix = BlockPrefix(layout, block, hf_prefix);
  for (const SuffixMap& entry : BlockMap(layout)) {
    out.push_back(Prefixed(entry, tessera_prefix, source_prefix));
  }
  return out;
}

// hf_prefix: "vit." for ViTForImageClassification, "" for a bare ViTModel.
std::vector<NameMapping> BuildMap(WeightLayout layout, int depth,
                                  absl::string_view hf_prefix) {
  const absl::string_view top_prefix =
      layout == WeightLayout::kHuggingFace ? hf_prefix : "";
  std::vector<NameMapping> out;
  for (const SuffixMap& entry : TopMap(layout))
    out.push_back(Prefixed(entry, "", top_prefix));
  for (int i = 0; i < depth; ++i) {
    for (NameMapping& mapping : BlockMappings(layout, i, hf_prefix)) {
      out.push_back(std::move(mapping));
    }
  }
  for (const SuffixMap& entry : TailMap(layout)) {
    const bool head = absl::StartsWith(entry.tessera, "head.");
    out.push_back(Prefixed(entry, "", head ? "" : top_prefix));
  }
  return out;
}

std::string ShapeString(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

// The tensor as a float32 LibTorch tensor of its shape (a copy: the file's
// bytes need not be aligned).
absl::StatusOr<torch::Tensor> ToTorch(const TensorView& view) {
  switch (view.dtype) {
    case SafetensorsDtype::kF32:
    case SafetensorsDtype::kF16:
    case SafetensorsDtype::kBF16:
    case SafetensorsDtype::kF64:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", view.name, "\" has dtype ", SafetensorsDtypeName(view.dtype),
          "; weights must be F32, F16, BF16 "
          "or F64"));
  }
  torch::Tensor out = torch::empty(view.shape, torch::kFloat);
  if (view.dtype == SafetensorsDtype::kF32) {
    if (!view.data.empty())
      std::memcpy(out.data_ptr<float>(), view.data.data(), view.data.size());
    return out;
  }
  ASSIGN_OR_RETURN(const std::vector<float> values, TensorToFloat32(view));
  if (!values.empty()) {
    std::memcpy(out.data_ptr<float>(), values.data(), values.size() * sizeof(float));
  }
  return out;
}

// "vit." when the file is a ViTForImageClassification's, "" for a ViTModel's.
std::string HfPrefix(const SafetensorsFile& file) {
  return file.Find("vit.embeddings.patch_embeddings.projection.weight") == nullptr &&
                 file.Find("embeddings.patch_embeddings.projection.weight") != nullptr
             ? ""
             : "vit.";
}

// The layout the options name, else the one the file's tensor names show.
absl::StatusOr<WeightLayout> LayoutOf(const SafetensorsFile& file,
                                      const PretrainedOptions& options) {
  if (options.layout.has_value()) return *options.layout;
  std::vector<std::string> names;
  for (const TensorView& tensor : file.tensors()) names.push_back(tensor.name);
  return DetectWeightLayout(names);
}

// The number of blocks: a file of another depth is not a near miss.
absl::Status CheckDepth(const SafetensorsFile& file, WeightLayout layout,
                        const std::string& hf_prefix, int depth) {
  int file_depth = 0;
  while (file.Find(BlockMappings(layout, file_depth, hf_prefix).front().source.front()) !=
         nullptr) {
    ++file_depth;
  }
  if (file_depth > 0 && file_depth != depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the file has ", file_depth, " encoder blocks (",
                     WeightLayoutName(layout), " names); the model has ", depth));
  }
  return absl::OkStatus();
}

// The tensors of one Load: those it looked up, those it needs and the file
// lacks, and the copies into parameters it makes once all are checked.
struct LoadPlan {
  std::set<std::string> consulted;
  std::vector<std::string> missing;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // parameter, value
};

// The head is taken whole or not at all: absent from the file, or of another
// class count (or width), it stays as the model initialised it.
bool HeadFits(const std::vector<NameMapping>& map, const SafetensorsFile& file,
              const torch::OrderedDict<std::string, torch::Tensor>& parameters,
              LoadPlan& plan) {
  bool head_fits = true;
  for (const NameMapping& mapping : map) {
    if (!IsHeadParameter(mapping.tessera)) continue;
    const TensorView* view = file.Find(mapping.source.front());
    const torch::Tensor* parameter = parameters.find(mapping.tessera);
    plan.consulted.insert(mapping.source.front());
    head_fits = head_fits && view != nullptr && parameter != nullptr &&
                c10::IntArrayRef(view->shape) == parameter->sizes();
  }
  return head_fits;
}

// The file's tensors for one parameter, concatenated along the first dimension
// when there are several; nullopt when one is missing (then it is in
// plan.missing).
absl::StatusOr<std::optional<torch::Tensor>> ReadMapped(const NameMapping& mapping,
                                                        const SafetensorsFile& file,
                                                        LoadPlan& plan) {
  std::vector<torch::Tensor> parts;
  for (const std::string& source : mapping.source) {
    plan.consulted.insert(source);
    const TensorView* view = file.Find(source);
    if (view == nullptr) {
      plan.missing.push_back(source);
      continue;
    }
    ASSIGN_OR_RETURN(torch::Tensor part, ToTorch(*view));
    parts.push_back(std::move(part));
  }
  if (parts.size() != mapping.source.size()) return std::nullopt;
  if (parts.size() > 1) {
    for (const torch::Tensor& part : parts) {
      if (part.dim() == 0 || part.sizes().slice(1) != parts.front().sizes().slice(1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors ", absl::StrJoin(mapping.source, " + "),
            " cannot be concatenated into ", mapping.tessera, " (shapes ",
            ShapeString(parts.front().sizes()), " and ", ShapeString(part.sizes()), ")"));
      }
    }
  }
  return parts.size() == 1 ? parts.front() : torch::cat(parts, 0);
}

// `value` in the parameter's shape: as it is, or (the position embedding of
// another grid) resampled. Notes which in the summary.
absl::StatusOr<torch::Tensor> FitToParameter(const NameMapping& mapping,
                                             torch::Tensor value,
                                             const torch::Tensor& parameter,
                                             const ViTConfig& config,
                                             PretrainedSummary& summary) {
  const std::string source_name = absl::StrJoin(mapping.source, " + ");
  const std::string value_shape = ShapeString(value.sizes());
  const std::string model_shape = ShapeString(parameter.sizes());
  if (value.sizes() == parameter.sizes()) {
    summary.loaded.push_back(mapping.tessera);
    return value;
  }
  if (mapping.tessera == "position_embedding" && value.dim() == 3 &&
      parameter.dim() == 3 && value.size(0) == 1 && value.size(2) == parameter.size(2)) {
    const int grid = config.image_size / config.patch_size;
    absl::StatusOr<torch::Tensor> resampled =
        ResamplePositionEmbedding(value, grid, grid);
    if (!resampled.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", source_name, " has shape ", value_shape,
                       "; the model's ", mapping.tessera, " is ", model_shape,
                       " and cannot be resampled to it: ", resampled.status().message()));
    }
    summary.resampled.push_back(
        absl::StrCat(mapping.tessera, " ", value_shape, " -> ", model_shape));
    return *std::move(resampled);
  }
  return absl::InvalidArgumentError(absl::StrCat("tensor ", source_name, " has shape ",
                                                 value_shape, "; the model's ",
                                                 mapping.tessera, " is ", model_shape));
}

// What the summary says besides the parameters: the file's tensors no
// parameter took, and a LayerNorm epsilon other than the layout's models use.
void NoteUnusedAndConventions(const SafetensorsFile& file, const LoadPlan& plan,
                              WeightLayout layout, const ViTConfig& config,
                              PretrainedSummary& summary) {
  for (const TensorView& tensor : file.tensors()) {
    if (plan.consulted.count(tensor.name) == 0) summary.unused.push_back(tensor.name);
  }
  if (layout != WeightLayout::kTessera &&
      config.layer_norm_eps != ConventionsOf(layout).layer_norm_eps) {
    summary.notes.push_back(absl::StrFormat(
        "the model's LayerNorm epsilon is %g; %s models use %g", config.layer_norm_eps,
        WeightLayoutName(layout), ConventionsOf(layout).layer_norm_eps));
  }
}

absl::StatusOr<PretrainedSummary> Load(VisionTransformerImpl& model,
                                       const SafetensorsFile& file,
                                       const PretrainedOptions& options) {
  const ViTConfig& config = model.config();
  PretrainedSummary summary;
  summary.metadata = file.metadata();
  ASSIGN_OR_RETURN(summary.layout, LayoutOf(file, options));
  const WeightLayout layout = summary.layout;
  const std::string hf_prefix = HfPrefix(file);
  RETURN_IF_ERROR(CheckDepth(file, layout, hf_prefix, config.depth));

  const torch::OrderedDict<std::string, torch::Tensor> parameters =
      model.named_parameters();
  const std::vector<NameMapping> map = BuildMap(layout, config.depth, hf_prefix);
  LoadPlan plan;
  const bool head_fits = HeadFits(map, file, parameters, plan);
  for (const NameMapping& mapping : map) {
    const torch::Tensor* parameter = parameters.find(mapping.tessera);
    if (parameter == nullptr) {
      return absl::InternalError(
          absl::StrCat("the ViT has no parameter \"", mapping.tessera, "\""));
    }
    if (IsHeadParameter(mapping.tessera) && !head_fits) {
      summary.reinitialised.push_back(mapping.tessera);
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<torch::Tensor> value, ReadMapped(mapping, file, plan));
    if (!value.has_value()) continue;
    ASSIGN_OR_RETURN(torch::Tensor fitted, FitToParameter(mapping, *std::move(value),
                                                          *parameter, config, summary));
    plan.copies.emplace_back(*parameter, std::move(fitted));
  }
  if (!plan.missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the file lacks ", plan.missing.size(), " tensors the model needs (",
        WeightLayoutName(layout), " names): ", absl::StrJoin(plan.missing, ", ")));
  }
  NoteUnusedAndConventions(file, plan, layout, config, summary);

  torch::NoGradGuard no_grad;
  for (auto& [parameter, value] : plan.copies) parameter.copy_(value);
  return summary;
}

nlohmann::json ConfigJson(const ViTConfig& config) {
  return {{"image_size", config.image_size},
          {"patch_size", config.patch_size},
          {"in_channels", config.in_channels},
          {"num_classes", config.num_classes},
          {"dim", config.dim},
          {"depth", config.depth},
          {"heads", config.heads},
          {"mlp_dim", config.mlp_dim},
          {"layer_norm_eps", config.layer_norm_eps}};
}

absl::Status Export(const VisionTransformerImpl& model, WeightLayout layout,
                    const std::vector<std::string>& class_names, const std::string& path,
                    const std::map<std::string, std::string>& extra_metadata) {
  const ViTConfig& config = model.config();
  if (!class_names.empty() &&
      class_names.size() != static_cast<size_t>(config.num_classes)) {
    return absl::InvalidArgumentError(absl::StrCat("export: ", class_names.size(),
                                                   " class names for a model of ",
                                                   config.num_classes, " classes"));
  }
  const torch::OrderedDict<std::string, torch::Tensor> parameters =
      model.named_parameters();
  std::vector<torch::Tensor> keep;  // owns the bytes `tensors` points at
  std::vector<TensorToWrite> tensors;
  for (const NameMapping& mapping : BuildMap(layout, config.depth, "vit.")) {
    const torch::Tensor* parameter = parameters.find(mapping.tessera);
    if (parameter == nullptr) {
      return absl::InternalError(
          absl::StrCat("the ViT has no parameter \"", mapping.tessera, "\""));
    }
    const torch::Tensor value =
        parameter->detach().to(torch::kCPU, torch::kFloat).contiguous();
    const std::vector<torch::Tensor> parts =
        mapping.source.size() == 1
            ? std::vector<torch::Tensor>{value}
            : value.chunk(static_cast<int64_t>(mapping.source.size()), 0);
    for (size_t i = 0; i < parts.size(); ++i) {
      keep.push_back(parts[i].contiguous());
      const torch::Tensor& part = keep.back();
      tensors.push_back({mapping.source[i], SafetensorsDtype::kF32, part.sizes().vec(),
                         absl::string_view(static_cast<const char*>(part.data_ptr()),
                                           static_cast<size_t>(part.nbytes()))});
    }
  }
  std::map<std::string, std::string> metadata = extra_metadata;
  metadata["format"] = "pt";
  metadata["layout"] = std::string(WeightLayoutName(layout));
  metadata["vit_config"] = ConfigJson(config).dump();
  try {
    metadata["class_names"] = nlohmann::json(class_names).dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: the class names are not UTF-8: ", e.what()));
  }
  return WriteSafetensors(path, tensors, metadata);
}

}  // namespace
}  // namespace vit_weights_internal

absl::StatusOr<WeightLayout> ParseWeightLayout(absl::string_view name) {
  if (name == "tessera") return WeightLayout::kTessera;
  if (name == "timm") return WeightLayout::kTimm;
  if (name == "hf" || name == "huggingface") return WeightLayout::kHuggingFace;
  if (name == "torchvision") return WeightLayout::kTorchvision;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown weight names \"", name, "\"; known: timm, hf, torchvision, tessera"));
}

absl::string_view WeightLayoutName(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kTimm:
      return "timm";
    case WeightLayout::kHuggingFace:
      return "hf";
    case WeightLayout::kTorchvision:
      return "torchvision";
    case WeightLayout::kTessera:
      break;
  }
  return "tessera";
}

LayoutConventions ConventionsOf(WeightLayout layout) {
  LayoutConventions conventions;
  switch (layout) {
    case WeightLayout::kHuggingFace:
      conventions.layer_norm_eps = 1e-12;
      break;
    case WeightLayout::kTorchvision:
      conventions.mean = {0.485, 0.456, 0.406};
      conventions.std = {0.229, 0.224, 0.225};
      break;
    case WeightLayout::kTimm:
    case WeightLayout::kTessera:
      break;
  }
  return conventions;
}

absl::StatusOr<WeightLayout> DetectWeightLayout(const std::vector<std::string>& names) {
  const std::set<std::string> all(names.begin(), names.end());
  auto has = [&](absl::string_view name) { return all.count(std::string(name)) > 0; };
  std::vector<WeightLayout> found;
  if (has("patch_embedding.weight") || has("position_embedding")) {
    found.push_back(WeightLayout::kTessera);
  }
  if (has("patch_embed.proj.weight") || has("pos_embed"))
    found.push_back(WeightLayout::kTimm);
  if (has("vit.embeddings.patch_embeddings.projection.weight") ||
      has("vit.embeddings.position_embeddings") ||
      has("embeddings.patch_embeddings.projection.weight") ||
      has("embeddings.position_embeddings")) {
    found.push_back(WeightLayout::kHuggingFace);
  }
  if (has("conv_proj.weight") || has("encoder.pos_embedding")) {
    found.push_back(WeightLayout::kTorchvision);
  }
  if (found.size() == 1) return found.front();
  std::vector<std::string> sample(names.begin(),
                                  names.begin() + std::min<size_t>(names.size(), 5));
  return absl::InvalidArgumentError(
      absl::StrCat(found.empty() ? "cannot tell whose ViT names these are"
                                 : "the names match several layouts",
                   " (", names.size(), " tensors: ", absl::StrJoin(sample, ", "),
                   names.size() > sample.size() ? ", ..." : "",
                   "); give the layout (timm, hf, torchvision, tessera)"));
}

std::vector<NameMapping> WeightNameMap(WeightLayout layout, int depth) {
  return vit_weights_internal::BuildMap(layout, depth, "vit.");
}

std::string PretrainedSummary::ToString() const {
  std::string out = absl::StrCat("pretrained weights (", WeightLayoutName(layout),
                                 " names): ", loaded.size(), " tensors loaded");
  if (!resampled.empty())
    absl::StrAppend(&out, "; resampled: ", absl::StrJoin(resampled, ", "));
  if (!reinitialised.empty()) {
    absl::StrAppend(
        &out, "; left initialised (new head): ", absl::StrJoin(reinitialised, ", "));
  }
  if (!unused.empty()) absl::StrAppend(&out, "; unused: ", absl::StrJoin(unused, ", "));
  for (const std::string& note : notes) absl::StrAppend(&out, "; ", note);
  return out;
}

absl::StatusOr<PretrainedSummary> LoadPretrained(VisionTransformerImpl& model,
                                                 const SafetensorsFile& file,
                                                 const PretrainedOptions& options) {
  try {
    return vit_weights_internal::Load(model, file, options);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("loading pretrained weights: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<PretrainedSummary> LoadPretrained(VisionTransformerImpl& model,
                                                 const std::string& path,
                                                 const PretrainedOptions& options) {
  ASSIGN_OR_RETURN(const std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::Open(path, options.file));
  absl::StatusOr<PretrainedSummary> summary = LoadPretrained(model, *file, options);
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat(path, ": ", summary.status().message()));
  }
  return summary;
}

absl::StatusOr<at::Tensor> ResamplePositionEmbedding(const at::Tensor& embedding,
                                                     int grid_height, int grid_width,
                                                     int prefix_tokens) {
  if (embedding.dim() != 3 || embedding.size(0) != 1 || prefix_tokens < 0 ||
      embedding.size(1) <= prefix_tokens || grid_height <= 0 || grid_width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a position embedding [1, ", prefix_tokens, " + tokens, dim] is needed, not ",
        vit_weights_internal::ShapeString(embedding.sizes())));
  }
  const int64_t tokens = embedding.size(1) - prefix_tokens;
  const auto side =
      static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  if (side * side != tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokens, " position tokens after the ", prefix_tokens,
                     " class token(s) do not form a square grid"));
  }
  if (side == grid_height && side == grid_width) return embedding;
  try {
    namespace F = torch::nn::functional;
    const int64_t dim = embedding.size(2);
    const torch::Tensor prefix = embedding.narrow(1, 0, prefix_tokens);
    torch::Tensor grid = embedding.narrow(1, prefix_tokens, tokens)
                             .reshape({1, side, side, dim})
                             .permute({0, 3, 1, 2})
                             .to(torch::kFloat);
    grid = F::interpolate(grid, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{grid_height, grid_width})
                                    .mode(torch::kBicubic)
                                    .align_corners(false));
    grid = grid.permute({0, 2, 3, 1})
               .reshape({1, int64_t{grid_height} * grid_width, dim})
               .to(embedding.scalar_type());
    return torch::cat({prefix, grid}, 1);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("resampling the position embedding: ", e.what_without_backtrace()));
  }
}

absl::Status ExportSafetensors(const VisionTransformerImpl& model, WeightLayout layout,
                               const std::vector<std::string>& class_names,
                               const std::string& path,
                               const std::map<std::string, std::string>& extra_metadata) {
  try {
    return vit_weights_internal::Export(model, layout, class_names, path, extra_metadata);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
  }
}

int ParameterLayerId(absl::string_view name, int depth) {
  if (absl::StartsWith(name, "patch_embedding.") || name == "class_token" ||
      name == "position_embedding") {
    return 0;
  }
  if (absl::ConsumePrefix(&name, "blocks.")) {
    int block = 0;
    if (absl::SimpleAtoi(name.substr(0, name.find('.')), &block)) return block + 1;
  }
  return depth + 1;
}

std::vector<ParameterGroup> LayerDecayParameterGroups(const VisionTransformerImpl& model,
                                                      double decay) {
  const int depth = model.config().depth;
  std::map<std::tuple<int, bool, bool>, ParameterGroup> groups;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const int layer = ParameterLayerId(name, depth);
    const bool weight_decay =
        item.value().dim() > 1 && name != "class_token" && name != "position_embedding";
    const bool head = IsHeadParameter(name);
    ParameterGroup& group = groups[{layer, weight_decay, head}];
    group.layer_id = layer;
    group.head = head;
    group.lr_scale = std::pow(decay, depth + 1 - layer);
    group.weight_decay = weight_decay;
    group.names.push_back(name);
  }
  std::vector<ParameterGroup> out;
  for (auto& [key, group] : groups) out.push_back(std::move(group));
  return out;
}

bool IsHeadParameter(absl::string_view name) { return absl::StartsWith(name, "head."); }

}  // namespace tessera::trainer
