#include "worker/trainer/model/optimizer_state.h"

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "worker/trainer/model/fused_optimizer.h"
#include "worker/trainer/model/optimizers.h"

namespace tessera::trainer {
namespace {

using fused_optimizer::StateKey;

template <typename StateMap>
auto KeyOf(const StateMap& /*states*/, const at::Tensor& param) {
  return StateKey<typename std::decay_t<StateMap>::key_type>(param);
}

torch::optim::OptimizerParamState* FindState(const torch::optim::Optimizer& optimizer,
                                             const at::Tensor& param) {
  const auto& states = optimizer.state();
  const auto found = states.find(KeyOf(states, param));
  return found == states.end() ? nullptr : found->second.get();
}

}  // namespace

std::optional<FlatParamState> ReadFlatState(const torch::optim::Optimizer& optimizer,
                                            const at::Tensor& param) {
  const OptimizerKind& kind = KindOf(optimizer);
  torch::optim::OptimizerParamState* found = FindState(optimizer, param);
  if (found == nullptr) return std::nullopt;
  return kind.read_state(*found);
}

void WriteFlatState(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                    const FlatParamState& state) {
  std::unique_ptr<torch::optim::OptimizerParamState> made =
      KindOf(optimizer).make_state(state, param);
  auto& states = optimizer.state();
  states[KeyOf(states, param)] = std::move(made);
}

int StateTensorsPerElement(const torch::optim::Optimizer& optimizer) {
  return KindOf(optimizer).state_tensors_per_element(optimizer);
}

}  // namespace tessera::trainer
