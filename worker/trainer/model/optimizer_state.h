// One parameter's optimizer state as flat tensors, whatever the optimizer:
// the bridge between an optimizer's own state map and layouts that cut the
// parameters differently (ZeRO's shards, dist/zero_optimizer.h, and the
// resharding of their checkpoints, run/zero_checkpoint.h).
//
// Each optimizer's own state layout is its row in optimizers.h (AdamW: step,
// exp_avg, exp_avg_sq, and max_exp_avg_sq with amsgrad; LAMB: step, exp_avg,
// exp_avg_sq; SGD: momentum_buffer). The tensors are flattened to one
// dimension, so a piece of a parameter and the whole one have the same form.
//
// Thread-safety: free functions over an optimizer with one caller at a time.
#ifndef TESSERA_WORKER_TRAINER_MODEL_OPTIMIZER_STATE_H_
#define TESSERA_WORKER_TRAINER_MODEL_OPTIMIZER_STATE_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace tessera::trainer {

struct FlatParamState {
  int64_t step = 0;  // 0 for optimizers that keep no count (SGD)
  // By name ("exp_avg", ...), each 1-D with the parameter's element count.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// The state `optimizer` keeps for `param`, flattened (views, not copies);
// nullopt when it has none yet (before its first step). Throws c10::Error for
// an optimizer it does not know.
std::optional<FlatParamState> ReadFlatState(const torch::optim::Optimizer& optimizer,
                                            const at::Tensor& param);

// Replaces `param`'s state in `optimizer` with `state`, its tensors copied to
// the parameter's device and shape. Throws c10::Error for an optimizer it does
// not know, or tensors that do not fit the parameter.
void WriteFlatState(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                    const FlatParamState& state);

// The state tensors the optimizer keeps per parameter element once it has
// stepped: 2 for AdamW and LAMB, 1 for SGD with momentum, else 0.
int StateTensorsPerElement(const torch::optim::Optimizer& optimizer);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_OPTIMIZER_STATE_H_
