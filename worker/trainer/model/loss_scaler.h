// The dynamic loss scale of fp16 training, as torch.cuda.amp.GradScaler keeps it:
// the loss is multiplied by scale() before backward so small gradients survive
// float16; after the all-reduce the gradients are divided by it again. A step
// whose gradients hold an inf or NaN is skipped and the scale halved; after
// growth_interval consecutive good steps it doubles.
//
// Pure bookkeeping (the trainer does the tensor work), so its rules are tested
// without LibTorch. Its state goes into checkpoints. Not thread-safe; owned by the
// training loop.
#ifndef TESSERA_WORKER_TRAINER_MODEL_LOSS_SCALER_H_
#define TESSERA_WORKER_TRAINER_MODEL_LOSS_SCALER_H_

#include <cstdint>

namespace tessera::trainer {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // good steps between increases
  double min_scale = 1.0;          // never below this (underflow protection)
};

struct LossScalerState {
  double scale = 65536.0;
  int64_t good_steps = 0;  // consecutive steps without inf/NaN
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  double scale() const { return state_.scale; }

  // Records the outcome of one step's gradients. Returns whether the optimizer
  // step should be taken (false: the gradients overflowed; skip it).
  bool Update(bool found_non_finite);

  const LossScalerState& state() const { return state_; }
  // Restores a state taken from state() (e.g. from a checkpoint).
  void Restore(const LossScalerState& state) { state_ = state; }

 private:
  const LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_LOSS_SCALER_H_
