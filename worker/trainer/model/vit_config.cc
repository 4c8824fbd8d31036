#include "worker/trainer/model/vit_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::trainer {
namespace {

ViTConfig Shape(int image_size, int patch_size, int in_channels, int num_classes, int dim,
                int depth, int heads, int mlp_dim) {
  ViTConfig config;
  config.image_size = image_size;
  config.patch_size = patch_size;
  config.in_channels = in_channels;
  config.num_classes = num_classes;
  config.dim = dim;
  config.depth = depth;
  config.heads = heads;
  config.mlp_dim = mlp_dim;
  return config;
}

}  // namespace

const std::vector<ViTPreset>& ViTPresets() {
  // The /16 shapes follow "An Image is Worth 16x16 Words" (Dosovitskiy et al.)
  // and DeiT for Ti/S; vit-micro is small enough for one CPU core. The CIFAR
  // shapes keep 64 patches of 4x4 px, as ViT-Lite (Hassani et al., "Escaping the
  // Big Data Paradigm with Compact Transformers") does for 32 px inputs:
  // vit-cifar-tiny (1.8M parameters with 10 classes) trains on CPUs;
  // vit-cifar-small is ViT-Lite-7/4 (3.7M). vit-l16 (ViT-L/16, 304M) is the
  // model a CPU rank of a few GiB holds only sharded (ZeRO stage 3).
  // clang-format off
  static const auto* const kPresets = new std::vector<ViTPreset>{
      //                        image patch ch classes dim depth heads mlp
      {"vit-micro",       Shape( 28,    4, 1,    10,  64,    4,    4,  128)},
      {"vit-cifar-tiny",  Shape( 32,    4, 3,    10, 192,    6,    3,  384)},
      {"vit-cifar-small", Shape( 32,    4, 3,    10, 256,    7,    4,  512)},
      {"vit-ti16",        Shape(224,   16, 3,  1000, 192,   12,    3,  768)},
      {"vit-s16",         Shape(224,   16, 3,  1000, 384,   12,    6, 1536)},
      {"vit-b16",         Shape(224,   16, 3,  1000, 768,   12,   12, 3072)},
      {"vit-l16",         Shape(224,   16, 3,  1000, 1024,  24,   16, 4096)},
  };
  // clang-format on
  return *kPresets;
}

absl::StatusOr<ViTConfig> FindViTPreset(const std::string& name) {
  std::vector<std::string> names;
  for (const ViTPreset& preset : ViTPresets()) {
    if (preset.name == name) return preset.config;
    names.push_back(preset.name);
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown model \"", name, "\"; known models: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<ViTConfig> ResolveViTConfig(const std::string& preset_name,
                                           int in_channels, int num_classes,
                                           int image_size) {
  absl::StatusOr<ViTConfig> config = FindViTPreset(preset_name);
  if (!config.ok()) return config.status();
  config->in_channels = in_channels;
  config->num_classes = num_classes;
  if (image_size > 0) config->image_size = image_size;
  absl::Status valid = ValidateViTConfig(*config);
  if (!valid.ok()) return valid;
  return config;
}

absl::Status ValidateViTConfig(const ViTConfig& c) {
  if (c.image_size <= 0 || c.patch_size <= 0 || c.in_channels <= 0 ||
      c.num_classes <= 0 || c.dim <= 0 || c.depth <= 0 || c.heads <= 0 ||
      c.mlp_dim <= 0) {
    return absl::InvalidArgumentError("ViT sizes must all be positive");
  }
  if (c.image_size % c.patch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image size ", c.image_size, " is not a multiple of patch size ", c.patch_size));
  }
  if (c.dim % c.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", c.dim, " is not a multiple of heads ", c.heads));
  }
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dropout must be in [0, 1), got ", c.dropout));
  }
  return absl::OkStatus();
}

int64_t ViTParameterCount(const ViTConfig& c) {
  const int64_t dim = c.dim;
  const int64_t patch_area = int64_t{c.patch_size} * c.patch_size;
  const int64_t patch_embedding = dim * c.in_channels * patch_area + dim;
  const int64_t class_token = dim;
  const int64_t position_embedding = (c.num_patches() + 1) * dim;
  const int64_t layer_norm = 2 * dim;
  const int64_t attention = (dim * 3 * dim + 3 * dim) + (dim * dim + dim);
  const int64_t mlp = (dim * c.mlp_dim + c.mlp_dim) + (c.mlp_dim * dim + dim);
  const int64_t block = layer_norm + attention + layer_norm + mlp;
  const int64_t head = dim * c.num_classes + c.num_classes;
  return patch_embedding + class_token + position_embedding + c.depth * block +
         layer_norm + head;
}

}  // namespace tessera::trainer
