// How a ViT's parameters are grouped (model/param_groups.h): weight decay on
// the weight matrices only, the fine-tuning recipes' layer groups, and ZeRO
// stage 3's units.
#include "worker/trainer/model/param_groups.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"

namespace tessera::trainer {
namespace {

VisionTransformer Micro() {
  const absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-micro", 1, 10);
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(1);
  return VisionTransformer(*config);
}

std::set<const void*> Impls(const std::vector<at::Tensor>& tensors) {
  std::set<const void*> impls;
  for (const at::Tensor& t : tensors) impls.insert(t.unsafeGetTensorImpl());
  return impls;
}

TEST(ParamGroupsTest, DecaysTheWeightMatricesOnly) {
  VisionTransformer model = Micro();
  const ParamGroups made = WeightDecayGroups(*model, WholeParameter);
  ASSERT_EQ(made.groups.size(), 2u);
  EXPECT_TRUE(made.groups[0].decay);
  EXPECT_FALSE(made.groups[1].decay);
  EXPECT_EQ(made.groups[0].lr_scale, 1.0);
  EXPECT_EQ(made.groups[1].lr_scale, 1.0);
  EXPECT_EQ(made.heads, (std::vector<bool>{true, true}));
  const std::set<const void*> decayed = Impls(made.groups[0].tensors);
  const std::set<const void*> not_decayed = Impls(made.groups[1].tensors);
  size_t count = 0;
  for (const auto& item : model->named_parameters()) {
    ++count;
    const bool token = item.key() == "class_token" || item.key() == "position_embedding";
    const bool matrix = item.value().dim() > 1 && !token;
    EXPECT_EQ(decayed.count(item.value().unsafeGetTensorImpl()), matrix ? 1u : 0u)
        << item.key();
    EXPECT_EQ(not_decayed.count(item.value().unsafeGetTensorImpl()), matrix ? 0u : 1u)
        << item.key();
  }
  EXPECT_EQ(decayed.size() + not_decayed.size(), count);
}

TEST(ParamGroupsTest, LeavesOutParametersWithoutATensorOnThisRank) {
  VisionTransformer model = Micro();
  // As a ZeRO rank that keeps no piece of the 1-D parameters.
  const ParamGroups made = WeightDecayGroups(*model, [](const at::Tensor& p) {
    return p.dim() <= 1 ? at::Tensor() : p.view({-1});
  });
  ASSERT_EQ(made.groups.size(), 2u);
  for (const at::Tensor& t : made.groups[0].tensors) EXPECT_EQ(t.dim(), 1);
  // Only the tokens are left undecayed.
  EXPECT_EQ(made.groups[1].tensors.size(), 2u);
}

TEST(ParamGroupsTest, LayerDecayGroupsFollowTheLayerTable) {
  VisionTransformer model = Micro();
  const std::vector<ParameterGroup> table = LayerDecayParameterGroups(*model, 0.75);
  const ParamGroups made = LayerDecayGroups(*model, 0.75, WholeParameter);
  ASSERT_EQ(made.groups.size(), table.size());
  ASSERT_EQ(made.heads.size(), table.size());
  for (size_t g = 0; g < table.size(); ++g) {
    EXPECT_EQ(made.groups[g].lr_scale, table[g].lr_scale) << g;
    EXPECT_EQ(made.groups[g].decay, table[g].weight_decay) << g;
    EXPECT_EQ(made.heads[g], table[g].head) << g;
    EXPECT_EQ(made.groups[g].tensors.size(), table[g].names.size()) << g;
  }
}

TEST(ParamGroupsTest, EachBlocksParametersFormAUnitOfTheirOwn) {
  VisionTransformer model = Micro();
  const std::vector<int> units = BlockUnits(*model);
  ASSERT_EQ(units.size(), model->parameters().size());
  size_t i = 0;
  for (const auto& item : model->named_parameters()) {
    if (absl::StartsWith(item.key(), "blocks.0.")) {
      EXPECT_EQ(units[i], 1) << item.key();
    } else if (!absl::StartsWith(item.key(), "blocks.")) {
      EXPECT_EQ(units[i], 0) << item.key();
    }
    ++i;
  }
  EXPECT_EQ(*std::max_element(units.begin(), units.end()), model->config().depth);
}

}  // namespace
}  // namespace tessera::trainer
