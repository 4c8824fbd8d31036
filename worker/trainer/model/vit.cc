#include "worker/trainer/model/vit.h"

#include <torch/version.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/trainer/model/fused_layers.h"

namespace tessera::trainer {
namespace {

torch::nn::LayerNorm MakeLayerNorm(const ViTConfig& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.dim}).eps(config.layer_norm_eps));
}

// The module's own forward, or the same LayerNorm on tessera's CPU kernels.
torch::Tensor ApplyLayerNorm(torch::nn::LayerNorm& norm, const torch::Tensor& x,
                             bool cpu_kernels) {
  if (!cpu_kernels) return norm->forward(x);
  return LayerNorm(x, norm->weight, norm->bias, norm->options.eps());
}

// The module's own forward, or the same product on tessera's CPU path.
torch::Tensor ApplyLinear(torch::nn::Linear& linear, const torch::Tensor& x,
                          bool cpu_kernels) {
  if (!cpu_kernels) return linear->forward(x);
  return Linear(x, linear->weight, linear->bias);
}

// Xavier-uniform weights and zero biases, as torchvision initialises the
// transformer's linear layers.
torch::nn::Linear MakeLinear(int in, int out) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out));
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(linear->weight);
  torch::nn::init::zeros_(linear->bias);
  return linear;
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(int dim, int heads, double dropout, bool cpu_kernels)
    : heads_(heads),
      scale_(1.0 / std::sqrt(static_cast<double>(dim / heads))),
      attention_dropout_(dropout),
      cpu_kernels_(cpu_kernels) {
  qkv_ = register_module("qkv", MakeLinear(dim, 3 * dim));
  proj_ = register_module("proj", MakeLinear(dim, dim));
  attn_dropout_ = register_module("attn_dropout", torch::nn::Dropout(dropout));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0);
  const int64_t tokens = x.size(1);
  const int64_t dim = x.size(2);
  // [3, batch, heads, tokens, head_dim]
  const torch::Tensor qkv = ApplyLinear(qkv_, x, cpu_kernels_)
                                .reshape({batch, tokens, 3, heads_, dim / heads_})
                                .permute({2, 0, 3, 1, 4});
  // unbind, not qkv[0..2]: its backward stacks the three gradients once, where
  // each select's backward would zero a full-size qkv gradient and add it.
  const std::vector<torch::Tensor> parts = qkv.unbind(0);
  const torch::Tensor& q = parts[0];
  const torch::Tensor& k = parts[1];
  const torch::Tensor& v = parts[2];
#if TORCH_VERSION_MAJOR >= 2
  // The fused kernel (flash / memory-efficient on CUDA, a fused CPU kernel
  // otherwise); it scales by 1/sqrt(head_dim) itself.
  const torch::Tensor context = at::scaled_dot_product_attention(
      q, k, v, /*attn_mask=*/{}, is_training() ? attention_dropout_ : 0.0);
#else
  // LibTorch 1.x has no fused attention: scale folded into the score matmul
  // (baddbmm's alpha), softmax, dropout, weighted sum.
  const int64_t head_dim = dim / heads_;
  const torch::Tensor q3 = q.reshape({batch * heads_, tokens, head_dim});
  const torch::Tensor k3 = k.reshape({batch * heads_, tokens, head_dim});
  torch::Tensor scores =
      torch::baddbmm(torch::empty({1, 1, 1}, q3.options()), q3, k3.transpose(1, 2),
                     /*beta=*/0.0, /*alpha=*/scale_);
  torch::Tensor attention = attn_dropout_->forward(scores.softmax(-1));
  const torch::Tensor context =
      torch::bmm(attention, v.reshape({batch * heads_, tokens, head_dim}))
          .view({batch, heads_, tokens, head_dim});
#endif
  return ApplyLinear(proj_, context.transpose(1, 2).reshape({batch, tokens, dim}),
                     cpu_kernels_);
}

EncoderBlockImpl::EncoderBlockImpl(const ViTConfig& config)
    : cpu_kernels_(config.cpu_kernels) {
  norm1_ = register_module("norm1", MakeLayerNorm(config));
  attention_ = register_module(
      "attention",
      SelfAttention(config.dim, config.heads, config.dropout, config.cpu_kernels));
  norm2_ = register_module("norm2", MakeLayerNorm(config));
  fc1_ = register_module("fc1", MakeLinear(config.dim, config.mlp_dim));
  fc2_ = register_module("fc2", MakeLinear(config.mlp_dim, config.dim));
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y =
      x + dropout_->forward(attention_->forward(ApplyLayerNorm(norm1_, x, cpu_kernels_)));
  torch::Tensor pre_activation =
      ApplyLinear(fc1_, ApplyLayerNorm(norm2_, y, cpu_kernels_), cpu_kernels_);
  torch::Tensor hidden =
      cpu_kernels_ ? Gelu(pre_activation) : torch::gelu(pre_activation);
  hidden = ApplyLinear(fc2_, dropout_->forward(hidden), cpu_kernels_);
  return y + dropout_->forward(hidden);
}

VisionTransformerImpl::VisionTransformerImpl(const ViTConfig& config) : config_(config) {
  patch_embedding_ = register_module(
      "patch_embedding",
      torch::nn::Conv2d(
          torch::nn::Conv2dOptions(config.in_channels, config.dim, config.patch_size)
              .stride(config.patch_size)));
  class_token_ = register_parameter("class_token", torch::zeros({1, 1, config.dim}));
  position_embedding_ =
      register_parameter("position_embedding",
                         torch::randn({1, config.num_patches() + 1, config.dim}) * 0.02);
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  blocks_ = register_module("blocks", torch::nn::Sequential());
  for (int i = 0; i < config.depth; ++i) blocks_->push_back(EncoderBlock(config));
  norm_ = register_module("norm", MakeLayerNorm(config));
  head_ = register_module("head", torch::nn::Linear(config.dim, config.num_classes));

  torch::NoGradGuard no_grad;
  // LeCun-normal patch projection (fan-in scaled), zero head: the initial logits
  // are all zero and the first loss is ln(classes).
  const double fan_in =
      static_cast<double>(config.in_channels) * config.patch_size * config.patch_size;
  torch::nn::init::normal_(patch_embedding_->weight, 0.0, std::sqrt(1.0 / fan_in));
  torch::nn::init::zeros_(patch_embedding_->bias);
  torch::nn::init::zeros_(head_->weight);
  torch::nn::init::zeros_(head_->bias);
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  const int64_t batch = images.size(0);
  if (hooks_ != nullptr) hooks_->BeforeForward();
  // [batch, dim, grid, grid] -> [batch, patches, dim]
  torch::Tensor x = patch_embedding_->forward(images).flatten(2).transpose(1, 2);
  x = torch::cat({class_token_.expand({batch, -1, -1}), x}, 1) + position_embedding_;
  x = dropout_->forward(x);
  if (hooks_ == nullptr) {
    x = blocks_->forward(x);
  } else {
    for (size_t i = 0; i < blocks_->size(); ++i) {
      const int block = static_cast<int>(i);
      hooks_->BeforeBlock(block);
      x = hooks_->AfterBlock(block, blocks_[i]->as<EncoderBlockImpl>()->forward(x));
    }
  }
  x = ApplyLayerNorm(norm_, x, config_.cpu_kernels);
  torch::Tensor logits = ApplyLinear(head_, x.select(1, 0), config_.cpu_kernels);
  if (hooks_ != nullptr) hooks_->AfterForward();
  return logits;
}

}  // namespace tessera::trainer
