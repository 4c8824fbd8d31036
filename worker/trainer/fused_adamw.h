// AdamW whose CPU step is one fused pass over each parameter: decoupled weight
// decay, both moment updates, bias correction and the parameter update happen
// per element in a single loop, with no temporaries. torch::optim::AdamW runs
// about eight tensor operations per parameter (two of them allocating), which
// for a small ViT is most of the optimizer's time.
//
// The arithmetic is torch::optim::AdamW's (same order of operations, float32),
// and the state is its AdamWParamState (step, exp_avg, exp_avg_sq), so
// checkpoints are interchangeable with the stock optimizer. Parameters that are
// not contiguous float32 CPU tensors, and amsgrad, take the stock step.
//
// Thread-safety: as torch::optim::AdamW (one caller at a time).
#ifndef TESSERA_WORKER_TRAINER_FUSED_ADAMW_H_
#define TESSERA_WORKER_TRAINER_FUSED_ADAMW_H_

#include <torch/optim/adamw.h>

#include <vector>

namespace tessera::trainer {

class FusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Parameters updated by the fused loop in the last step (the rest took the
  // stock path): for tests and logs.
  int fused_last_step() const { return fused_last_step_; }

 private:
  int fused_last_step_ = 0;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_FUSED_ADAMW_H_
