// BlockHooks: calls around a model's transformer blocks in its forward pass,
// for a caller that keeps the blocks' parameters elsewhere between uses (ZeRO
// stage 3, dist/zero_optimizer.h, gathers a block's parameters just before it
// runs and frees them after). The model calls them on the thread that runs
// forward; VisionTransformerImpl::set_block_hooks installs them.
#ifndef TESSERA_WORKER_TRAINER_MODEL_BLOCK_HOOKS_H_
#define TESSERA_WORKER_TRAINER_MODEL_BLOCK_HOOKS_H_

#include <ATen/core/Tensor.h>

namespace tessera::trainer {

class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  // Before anything of the forward pass runs.
  virtual void BeforeForward() = 0;
  // Before and after block `block` (0 = the first); AfterBlock returns the
  // block's output, or a tensor that stands for it (e.g. one with a hook
  // for its backward).
  virtual void BeforeBlock(int block) = 0;
  virtual at::Tensor AfterBlock(int block, at::Tensor output) = 0;
  // After the model's output is made.
  virtual void AfterForward() = 0;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_BLOCK_HOOKS_H_
