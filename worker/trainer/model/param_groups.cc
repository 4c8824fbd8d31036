#include "worker/trainer/model/param_groups.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "worker/trainer/model/vit_weights.h"

namespace tessera::trainer {

at::Tensor WholeParameter(const at::Tensor& parameter) { return parameter; }

ParamGroups WeightDecayGroups(const VisionTransformerImpl& model,
                              const OptimizedTensor& optimized) {
  TensorGroup decayed;
  TensorGroup not_decayed{.decay = false};
  for (const auto& item : model.named_parameters()) {
    const bool is_token =
        item.key() == "class_token" || item.key() == "position_embedding";
    torch::Tensor tensor = optimized(item.value());
    if (!tensor.defined()) continue;
    // Dimensions of the parameter, not of a (flat) piece.
    (item.value().dim() <= 1 || is_token ? not_decayed : decayed)
        .tensors.push_back(tensor);
  }
  ParamGroups made;
  made.groups.push_back(std::move(decayed));
  made.groups.push_back(std::move(not_decayed));
  made.heads.assign(made.groups.size(), true);
  return made;
}

ParamGroups LayerDecayGroups(const VisionTransformerImpl& model, double layer_decay,
                             const OptimizedTensor& optimized) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : model.named_parameters()) by_name[item.key()] = item.value();
  ParamGroups made;
  for (const ParameterGroup& g : LayerDecayParameterGroups(model, layer_decay)) {
    TensorGroup group{.lr_scale = g.lr_scale, .decay = g.weight_decay};
    for (const std::string& name : g.names) {
      torch::Tensor tensor = optimized(by_name.at(name));
      if (tensor.defined()) group.tensors.push_back(tensor);
    }
    made.groups.push_back(std::move(group));
    made.heads.push_back(g.head);
  }
  return made;
}

std::vector<int> BlockUnits(const VisionTransformerImpl& model) {
  std::vector<int> units;
  for (const auto& item : model.named_parameters()) {
    int unit = 0;
    if (absl::StartsWith(item.key(), "blocks.")) {
      const std::string_view rest = std::string_view(item.key()).substr(7);
      unit = 1 + std::stoi(std::string(rest.substr(0, rest.find('.'))));
    }
    units.push_back(unit);
  }
  return units;
}

}  // namespace tessera::trainer
