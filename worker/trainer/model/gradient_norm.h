// Checks and clipping over a step's gradients as a whole: the gradient
// buffers of every parameter (the reducer's buckets, reducer.h), treated as
// one vector.
//
// Use: after the gradients are summed over the ranks and before the
// optimizer's step: AnyNonFinite for fp16's overflow check (loss_scaler.h),
// ClipGradientNorm for --clip-grad-norm. ZeRO's sharded gradients have their
// own (ZeroOptimizer::AnyNonFinite and ClipGradients), which sum the same way.
//
// Thread-safety: the buffers must not change while a call runs.
#ifndef TESSERA_WORKER_TRAINER_MODEL_GRADIENT_NORM_H_
#define TESSERA_WORKER_TRAINER_MODEL_GRADIENT_NORM_H_

#include <ATen/core/Tensor.h>

#include <vector>

namespace tessera::trainer {

// Multiplies the gradients (bucket buffers) by min(1, max_norm / global norm),
// without a host sync. The squares are summed in double and the factor is
// rounded once to the buffers' type, as ZeroOptimizer::ClipGradients does over
// its shards: a float sum's rounding depends on LibTorch's reduction order, and
// 30 AdamW steps grow that difference past 1e-5 of the parameters.
void ClipGradientNorm(const std::vector<at::Tensor>& buffers, double max_norm);

// Whether any element of the buffers is infinite or NaN (their sum is not
// finite). Reads the sum on the host: waits for the device's queued work.
bool AnyNonFinite(const std::vector<at::Tensor>& buffers);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_GRADIENT_NORM_H_
