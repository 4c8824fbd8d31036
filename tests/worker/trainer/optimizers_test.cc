// The optimizer table (model/optimizers.h): every row makes its optimizer
// over scaled, decayed or undecayed groups, round-trips its state through the
// flat form, and says what ZeRO and a captured step need of it.
#include "worker/trainer/model/optimizers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/trainer_choices.h"
#include "worker/trainer/model/fused_lamb.h"
#include "worker/trainer/model/optimizer_state.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<TensorGroup> TwoGroups(std::vector<torch::Tensor>& params) {
  torch::manual_seed(7);
  params = {torch::randn({4, 3}).requires_grad_(), torch::randn({5}).requires_grad_()};
  return {TensorGroup{.tensors = {params[0]}},
          TensorGroup{.tensors = {params[1]}, .lr_scale = 0.5, .decay = false}};
}

void SetGradients(std::vector<torch::Tensor>& params, double scale) {
  for (torch::Tensor& p : params) {
    p.mutable_grad() = torch::full_like(p, scale) + 0.1 * p.detach();
  }
}

OptimizerSettings Settings(const std::string& name) {
  OptimizerSettings s;
  s.name = name;
  s.lr = 0.01;
  s.weight_decay = 0.1;
  s.momentum = 0.9;
  return s;
}

TEST(OptimizersTest, TheTableNamesTheSpecsChoicesInOrder) {
  std::vector<std::string> table;
  for (const OptimizerKind& kind : Optimizers()) table.emplace_back(kind.name);
  std::vector<std::string> choices(kOptimizerChoices.begin(), kOptimizerChoices.end());
  EXPECT_EQ(table, choices);
}

TEST(OptimizersTest, EachRowScalesItsGroupsRatesAndDecaysOnlyWhereAsked) {
  for (const OptimizerKind& kind : Optimizers()) {
    SCOPED_TRACE(kind.name);
    std::vector<torch::Tensor> params;
    auto optimizer = MakeOptimizer(TwoGroups(params), Settings(kind.name));
    ASSERT_EQ(optimizer->param_groups().size(), 2u);
    EXPECT_EQ(&KindOf(*optimizer), &kind);
    EXPECT_DOUBLE_EQ(optimizer->param_groups()[0].options().get_lr(), 0.01);
    EXPECT_DOUBLE_EQ(optimizer->param_groups()[1].options().get_lr(), 0.005);
    // Weight decay, and LAMB's trust ratio, on the decayed group only.
    const std::string name = kind.name;
    for (size_t g = 0; g < 2; ++g) {
      const auto& options = optimizer->param_groups()[g].options();
      const double expected = g == 0 ? 0.1 : 0.0;
      if (name == "adamw") {
        EXPECT_DOUBLE_EQ(
            static_cast<const torch::optim::AdamWOptions&>(options).weight_decay(),
            expected);
      } else if (name == "sgd") {
        const auto& sgd = static_cast<const torch::optim::SGDOptions&>(options);
        EXPECT_DOUBLE_EQ(sgd.weight_decay(), expected);
        EXPECT_DOUBLE_EQ(sgd.momentum(), 0.9);
      } else {
        const auto& lamb = static_cast<const LambOptions&>(options);
        EXPECT_DOUBLE_EQ(lamb.weight_decay(), expected);
        EXPECT_EQ(lamb.trust_ratio(), g == 0);
      }
    }
  }
}

// The optimizer keys of the job spec (adam_betas, adam_eps, lamb_max_trust,
// lamb_min_trust, lamb_trust_when_no_decay) reach every group of the
// optimizers they belong to.
TEST(OptimizersTest, TheOptimizerKeysReachEveryGroup) {
  OptimizerSettings s = Settings("adamw");
  s.beta1 = 0.8;
  s.beta2 = 0.95;
  s.adam_eps = 1e-7;
  s.lamb_max_trust = 2.0;
  s.lamb_min_trust = 0.01;
  std::vector<torch::Tensor> params;
  auto adamw = MakeOptimizer(TwoGroups(params), s);
  for (const auto& group : adamw->param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    EXPECT_DOUBLE_EQ(std::get<0>(o.betas()), 0.8);
    EXPECT_DOUBLE_EQ(std::get<1>(o.betas()), 0.95);
    EXPECT_DOUBLE_EQ(o.eps(), 1e-7);
  }
  for (const bool everywhere : {false, true}) {
    s.name = "lamb";
    s.lamb_trust_when_no_decay = everywhere;
    auto lamb = MakeOptimizer(TwoGroups(params), s);
    for (size_t g = 0; g < 2; ++g) {
      const auto& o = static_cast<const LambOptions&>(lamb->param_groups()[g].options());
      EXPECT_DOUBLE_EQ(std::get<0>(o.betas()), 0.8);
      EXPECT_DOUBLE_EQ(o.max_trust_ratio(), 2.0);
      EXPECT_DOUBLE_EQ(o.min_trust_ratio(), 0.01);
      EXPECT_DOUBLE_EQ(o.eps(), 1e-6) << "LAMB keeps its own epsilon";
      EXPECT_EQ(o.trust_ratio(), g == 0 || everywhere) << "group " << g;
    }
  }
}

// A run resumed from the flat state (ZeRO's shard files, resharding) steps
// exactly as the run that saved it.
TEST(OptimizersTest, EachRowsFlatStateResumesTheSameSteps) {
  for (const OptimizerKind& kind : Optimizers()) {
    SCOPED_TRACE(kind.name);
    std::vector<torch::Tensor> params;
    auto first = MakeOptimizer(TwoGroups(params), Settings(kind.name));
    for (int step = 1; step <= 3; ++step) {
      SetGradients(params, step);
      first->step();
    }
    std::vector<torch::Tensor> copies;
    for (const torch::Tensor& p : params) {
      copies.push_back(p.detach().clone().requires_grad_());
    }
    std::vector<TensorGroup> groups = {
        TensorGroup{.tensors = {copies[0]}},
        TensorGroup{.tensors = {copies[1]}, .lr_scale = 0.5, .decay = false}};
    auto resumed = MakeOptimizer(std::move(groups), Settings(kind.name));
    for (size_t i = 0; i < params.size(); ++i) {
      std::optional<FlatParamState> flat = ReadFlatState(*first, params[i]);
      ASSERT_TRUE(flat.has_value());
      EXPECT_EQ(flat->step, kind.name == std::string("sgd") ? 0 : 3);
      EXPECT_EQ(static_cast<int>(flat->tensors.size()),
                kind.state_tensors_per_element(*first));
      WriteFlatState(*resumed, copies[i], *flat);
    }
    SetGradients(params, 4);
    SetGradients(copies, 4);
    first->step();
    resumed->step();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], copies[i])) << "parameter " << i;
    }
  }
}

TEST(OptimizersTest, OnlyLambAsksZeroForWholeParameterNormsAndOnlyAdamWIsCapturable) {
  for (const OptimizerKind& kind : Optimizers()) {
    const std::string name = kind.name;
    EXPECT_EQ(kind.set_norm_reduction != nullptr, name == "lamb") << name;
    EXPECT_EQ(kind.capturable, name == "adamw") << name;
  }
  // The reduction given is the one LAMB's step calls, once per step.
  std::vector<torch::Tensor> params;
  auto lamb = MakeOptimizer(TwoGroups(params), Settings("lamb"));
  int calls = 0;
  FindOptimizer("lamb")->set_norm_reduction(
      *lamb, [&](const std::vector<at::Tensor>& tensors, at::Tensor& squared) {
        ++calls;
        EXPECT_EQ(squared.size(0), static_cast<int64_t>(tensors.size()));
      });
  SetGradients(params, 1);
  lamb->step();
  EXPECT_EQ(calls, 1);
}

TEST(OptimizersTest, UnknownNamesAndForeignOptimizersAreRefusedByName) {
  EXPECT_EQ(FindOptimizer("adam"), nullptr);
  std::vector<torch::Tensor> params;
  try {
    MakeOptimizer(TwoGroups(params), Settings("adam"));
    ADD_FAILURE() << "made an unknown optimizer";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown optimizer \"adam\""));
  }
  torch::optim::Adam adam(std::vector<torch::Tensor>{torch::zeros({2}).requires_grad_()});
  EXPECT_THROW(KindOf(adam), c10::Error);
}

}  // namespace
}  // namespace tessera::trainer
