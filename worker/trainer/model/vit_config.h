// Vision Transformer shapes: the named presets (--model) and the resolution of a
// preset against a dataset (input channels and class count come from the data).
//
// No LibTorch here, so flag validation and parameter arithmetic stay cheap to
// compile; vit.h builds the module from a ViTConfig. Pure functions over a
// constant table: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_MODEL_VIT_CONFIG_H_
#define TESSERA_WORKER_TRAINER_MODEL_VIT_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::trainer {

struct ViTConfig {
  int image_size = 28;  // input height and width the model expects
  int patch_size = 4;   // square patches; image_size must be a multiple
  int in_channels = 1;
  int num_classes = 10;
  int dim = 64;          // token width
  int depth = 4;         // encoder blocks
  int heads = 4;         // attention heads; dim must be a multiple
  int mlp_dim = 128;     // hidden width of each block's MLP
  double dropout = 0.0;  // after embeddings, attention output and MLP
  double layer_norm_eps = 1e-6;
  // Not part of the shape: run LayerNorm, GELU and the Linear layers on tessera's CPU
  // kernels (fused_layers.h) where they apply; false keeps LibTorch's (--cpu-kernels).
  bool cpu_kernels = true;

  int num_patches() const {
    return (image_size / patch_size) * (image_size / patch_size);
  }
};

struct ViTPreset {
  std::string name;
  ViTConfig config;  // channels and classes as published; see ResolveViTConfig
};

// The preset table: vit-micro (28 px, for Fashion-MNIST and tests), vit-cifar-tiny
// and vit-cifar-small (32 px, patch 4: CIFAR at its native size on CPUs and small
// GPUs), and the ViT-Ti/16, ViT-S/16, ViT-B/16 and ViT-L/16 shapes (224 px,
// ImageNet-1k heads; the paper's CIFAR runs use ViT-B/16 on images resized to
// 224 px).
const std::vector<ViTPreset>& ViTPresets();

// The preset called `name`, or NotFound listing the known names.
absl::StatusOr<ViTConfig> FindViTPreset(const std::string& name);

// The preset with the dataset's input channels and class count, and with
// `image_size` as its input size when positive (--image-size; 0 keeps the
// preset's). InvalidArgument when the patch size does not divide the image size.
// The data pipeline resizes images that differ from the model's size.
absl::StatusOr<ViTConfig> ResolveViTConfig(const std::string& preset_name,
                                           int in_channels, int num_classes,
                                           int image_size = 0);

// InvalidArgument unless every size is positive, the image splits into whole
// patches, dim splits into whole heads and dropout is in [0, 1).
absl::Status ValidateViTConfig(const ViTConfig& config);

// Number of trainable parameters of the model vit.h builds for `config`
// (86,567,656 for vit-b16 with 3 channels and 1000 classes, as torchvision's
// vit_b_16; 304,326,632 for vit-l16, as vit_l_16).
int64_t ViTParameterCount(const ViTConfig& config);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_VIT_CONFIG_H_
