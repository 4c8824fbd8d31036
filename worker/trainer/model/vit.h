// The Vision Transformer as a LibTorch module: patch embedding (a Conv2d whose
// stride is the patch size), a learned class token and position embedding,
// `depth` pre-norm encoder blocks (LayerNorm, multi-head self-attention, LayerNorm,
// GELU MLP, each with a residual connection), a final LayerNorm and a linear head
// on the class token. Shapes come from a ViTConfig (vit_config.h); parameter
// counts match torchvision's VisionTransformer for the same shape.
//
// Attention uses the fastest kernel the linked LibTorch has: the fused
// at::scaled_dot_product_attention from LibTorch 2, a matmul + softmax path with
// the scale folded into the score product before that. Dropout (config.dropout)
// applies to the embeddings, the attention weights and the MLP and residual
// branches, and only in training mode.
//
// Parameters are registered in a fixed order (embeddings, blocks in order, norm,
// head), which the parameter hash and the gradient buckets rely on.
// A module is used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_MODEL_VIT_H_
#define TESSERA_WORKER_TRAINER_MODEL_VIT_H_

#include <torch/torch.h>

#include "worker/trainer/model/block_hooks.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {

class SelfAttentionImpl : public torch::nn::Module {
 public:
  // cpu_kernels: ViTConfig::cpu_kernels.
  SelfAttentionImpl(int dim, int heads, double dropout, bool cpu_kernels = true);
  // [batch, tokens, dim] -> [batch, tokens, dim]
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int heads_;
  double scale_;              // 1 / sqrt(head_dim)
  double attention_dropout_;  // on the attention weights while training
  bool cpu_kernels_;
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear proj_{nullptr};
  torch::nn::Dropout attn_dropout_{nullptr};
};
TORCH_MODULE(SelfAttention);

class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(const ViTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm norm1_{nullptr};
  SelfAttention attention_{nullptr};
  torch::nn::LayerNorm norm2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  bool cpu_kernels_;  // ViTConfig::cpu_kernels (LayerNorm, GELU and Linear)
};
TORCH_MODULE(EncoderBlock);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  // `config` must pass ValidateViTConfig.
  explicit VisionTransformerImpl(const ViTConfig& config);

  // images [batch, in_channels, image_size, image_size] -> logits [batch, classes].
  torch::Tensor forward(const torch::Tensor& images);

  const ViTConfig& config() const { return config_; }

  // Hooks called by every forward from now on (null: none); not owned, and
  // must outlive their use.
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }

 private:
  ViTConfig config_;
  BlockHooks* hooks_ = nullptr;
  torch::nn::Conv2d patch_embedding_{nullptr};
  torch::Tensor class_token_;
  torch::Tensor position_embedding_;
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(VisionTransformer);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_VIT_H_
