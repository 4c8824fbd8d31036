#include "worker/trainer/model/fused_adamw.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

// Two groups, as the trainer builds them: weight decay on matrices only.
template <typename Optimizer>
std::unique_ptr<Optimizer> Make(const std::vector<torch::Tensor>& decayed,
                                const std::vector<torch::Tensor>& plain, double lr) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(lr).weight_decay(0.05)));
  groups.emplace_back(plain, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(lr).weight_decay(0.0)));
  return std::make_unique<Optimizer>(std::move(groups), torch::optim::AdamWOptions(lr));
}

struct Params {
  std::vector<torch::Tensor> decayed;
  std::vector<torch::Tensor> plain;
  std::vector<torch::Tensor> all() const {
    std::vector<torch::Tensor> v = decayed;
    v.insert(v.end(), plain.begin(), plain.end());
    return v;
  }
};

Params MakeParams() {
  torch::manual_seed(3);
  Params p;
  p.decayed = {torch::randn({64, 48}), torch::randn({100003})};  // odd length: loop tail
  p.plain = {torch::randn({48}), torch::randn({1, 7, 5})};
  for (auto* list : {&p.decayed, &p.plain}) {
    for (torch::Tensor& t : *list) t.requires_grad_(true);
  }
  return p;
}

Params Clone(const Params& from) {
  Params p;
  for (const torch::Tensor& t : from.decayed) {
    p.decayed.push_back(t.detach().clone().requires_grad_(true));
  }
  for (const torch::Tensor& t : from.plain) {
    p.plain.push_back(t.detach().clone().requires_grad_(true));
  }
  return p;
}

// The same gradients (seeded per step) into both parameter sets.
void SetGradients(const Params& a, const Params& b, int step) {
  torch::manual_seed(1000 + step);
  const std::vector<torch::Tensor> pa = a.all();
  const std::vector<torch::Tensor> pb = b.all();
  for (size_t i = 0; i < pa.size(); ++i) {
    torch::Tensor g = torch::randn(pa[i].sizes()) * (0.1 + static_cast<double>(i));
    pa[i].mutable_grad() = g.clone();
    pb[i].mutable_grad() = g.clone();
  }
}

void ExpectClose(const Params& a, const Params& b) {
  const std::vector<torch::Tensor> pa = a.all();
  const std::vector<torch::Tensor> pb = b.all();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i], pb[i], /*rtol=*/1e-5, /*atol=*/1e-6))
        << "parameter " << i << " max diff " << (pa[i] - pb[i]).abs().max().item<float>();
  }
}

TEST(FusedAdamWTest, MatchesTorchAdamWOverManyStepsWithChangingLearningRate) {
  Params fused_params = MakeParams();
  Params stock_params = Clone(fused_params);
  auto fused = Make<FusedAdamW>(fused_params.decayed, fused_params.plain, 1e-2);
  auto stock = Make<torch::optim::AdamW>(stock_params.decayed, stock_params.plain, 1e-2);
  for (int step = 0; step < 30; ++step) {
    SetGradients(fused_params, stock_params, step);
    const double lr = 1e-2 * (1.0 + step) / 30.0;
    for (auto& g : fused->param_groups()) g.options().set_lr(lr);
    for (auto& g : stock->param_groups()) g.options().set_lr(lr);
    fused->step();
    stock->step();
    EXPECT_EQ(fused->last_step_count(AdamWPath::kCpuLoop), 4)
        << "every parameter takes the fused loop";
  }
  ExpectClose(fused_params, stock_params);
  // The parameters moved: the comparison is not between two untouched sets.
  EXPECT_FALSE(torch::allclose(fused_params.decayed[0], MakeParams().decayed[0]));
}

TEST(FusedAdamWTest, StateRoundTripsThroughTheStockOptimizersCheckpoint) {
  Params fused_params = MakeParams();
  Params stock_params = Clone(fused_params);
  auto fused = Make<FusedAdamW>(fused_params.decayed, fused_params.plain, 1e-3);
  auto stock = Make<torch::optim::AdamW>(stock_params.decayed, stock_params.plain, 1e-3);
  for (int step = 0; step < 5; ++step) {
    SetGradients(fused_params, stock_params, step);
    fused->step();
    stock->step();
  }
  // Save the fused optimizer; load it into a fresh stock one over copies of the
  // fused parameters; both continue identically.
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    fused->save(archive);
    archive.save_to(saved);
  }
  Params resumed_params = Clone(fused_params);
  auto resumed =
      Make<torch::optim::AdamW>(resumed_params.decayed, resumed_params.plain, 1e-3);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    resumed->load(archive);
  }
  for (int step = 5; step < 10; ++step) {
    SetGradients(fused_params, resumed_params, step);
    fused->step();
    resumed->step();
  }
  ExpectClose(fused_params, resumed_params);
}

TEST(FusedAdamWTest, NonContiguousParametersTakeTheStockStep) {
  torch::manual_seed(5);
  torch::Tensor base = torch::randn({8, 6});
  torch::Tensor strided = base.t().detach().requires_grad_(true);  // not contiguous
  torch::Tensor dense = torch::randn({10}).requires_grad_(true);
  torch::Tensor strided_ref = strided.detach().clone().requires_grad_(true);
  torch::Tensor dense_ref = dense.detach().clone().requires_grad_(true);
  auto fused = Make<FusedAdamW>({strided}, {dense}, 1e-2);
  auto stock = Make<torch::optim::AdamW>({strided_ref}, {dense_ref}, 1e-2);
  for (int step = 0; step < 3; ++step) {
    torch::Tensor g1 = torch::randn({6, 8});
    torch::Tensor g2 = torch::randn({10});
    strided.mutable_grad() = g1.clone();
    strided_ref.mutable_grad() = g1.clone();
    dense.mutable_grad() = g2.clone();
    dense_ref.mutable_grad() = g2.clone();
    fused->step();
    stock->step();
    EXPECT_EQ(fused->last_step_count(AdamWPath::kCpuLoop), 1);
    EXPECT_EQ(fused->last_step_count(AdamWPath::kStock), 1);
    // The stock step must not have run a second time on the fused parameter.
    EXPECT_TRUE(dense.grad().defined());
  }
  EXPECT_TRUE(torch::allclose(strided, strided_ref, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(dense, dense_ref, 1e-5, 1e-6));
}

// The paths a CUDA parameter takes (at::_fused_adamw_ where LibTorch has it,
// the _foreach_* ops otherwise), run here on CPU tensors.
class DevicePathTest : public ::testing::TestWithParam<AdamWPath> {
 protected:
  void SetUp() override {
    if (GetParam() == AdamWPath::kFused && !FusedAdamW::HasFusedKernel(c10::kCPU)) {
      GTEST_SKIP() << "LibTorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR
                   << " has no CPU kernel for _fused_adamw_ (it came with 2.4); the "
                      "foreach path is tested instead";
    }
  }

  std::unique_ptr<FusedAdamW> MakeForced(const Params& params, double lr) const {
    auto optimizer = Make<FusedAdamW>(params.decayed, params.plain, lr);
    optimizer->ForcePath(GetParam());
    return optimizer;
  }

  // foreach runs AdamW's own float32 operations in its order: equal. The fused
  // kernel orders them its own way: equal up to rounding.
  void ExpectMatches(const Params& a, const Params& b) const {
    if (GetParam() == AdamWPath::kFused) {
      ExpectClose(a, b);
      return;
    }
    const std::vector<torch::Tensor> pa = a.all();
    const std::vector<torch::Tensor> pb = b.all();
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_TRUE(torch::equal(pa[i], pb[i]))
          << "parameter " << i << " max diff "
          << (pa[i] - pb[i]).abs().max().item<float>();
    }
  }
};

TEST_P(DevicePathTest, MatchesTorchAdamWOverManyStepsWithChangingLearningRate) {
  Params forced_params = MakeParams();
  Params stock_params = Clone(forced_params);
  auto forced = MakeForced(forced_params, 1e-2);
  auto stock = Make<torch::optim::AdamW>(stock_params.decayed, stock_params.plain, 1e-2);
  for (int step = 0; step < 30; ++step) {
    SetGradients(forced_params, stock_params, step);
    const double lr = 1e-2 * (1.0 + step) / 30.0;
    for (auto& g : forced->param_groups()) g.options().set_lr(lr);
    for (auto& g : stock->param_groups()) g.options().set_lr(lr);
    forced->step();
    stock->step();
    ASSERT_EQ(forced->last_step_count(GetParam()), 4) << "every parameter takes the path";
  }
  ExpectMatches(forced_params, stock_params);
  EXPECT_FALSE(torch::allclose(forced_params.decayed[0], MakeParams().decayed[0]));
}

TEST_P(DevicePathTest, CheckpointRoundTripContinuesLikeTheUninterruptedRun) {
  Params straight_params = MakeParams();
  Params interrupted_params = Clone(straight_params);
  Params stock_params = Clone(straight_params);
  auto straight = MakeForced(straight_params, 1e-3);
  auto interrupted = MakeForced(interrupted_params, 1e-3);
  for (int step = 0; step < 5; ++step) {
    SetGradients(straight_params, interrupted_params, step);
    straight->step();
    interrupted->step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    interrupted->save(archive);
    archive.save_to(saved);
  }
  const std::string bytes = saved.str();
  // A fresh optimizer of the same path, and the stock one, over copies of the
  // parameters, resume from the file.
  Params resumed_params = Clone(interrupted_params);
  stock_params = Clone(interrupted_params);
  auto resumed = MakeForced(resumed_params, 1e-3);
  auto stock = Make<torch::optim::AdamW>(stock_params.decayed, stock_params.plain, 1e-3);
  for (torch::optim::Optimizer* optimizer :
       {static_cast<torch::optim::Optimizer*>(resumed.get()),
        static_cast<torch::optim::Optimizer*>(stock.get())}) {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer->load(archive);
  }
  for (int step = 5; step < 10; ++step) {
    SetGradients(straight_params, resumed_params, step);
    SetGradients(stock_params, stock_params, step);
    straight->step();
    resumed->step();
    stock->step();
  }
  // Bias correction continued from step 5, not from 0: same as never stopping.
  ExpectMatches(straight_params, resumed_params);
  ExpectMatches(straight_params, stock_params);
}

INSTANTIATE_TEST_SUITE_P(FusedAdamWTest, DevicePathTest,
                         ::testing::Values(AdamWPath::kForeach, AdamWPath::kFused),
                         [](const ::testing::TestParamInfo<AdamWPath>& info) {
                           return std::string(info.param == AdamWPath::kFused
                                                  ? "FusedKernel"
                                                  : "Foreach");
                         });

}  // namespace
}  // namespace tessera::trainer
