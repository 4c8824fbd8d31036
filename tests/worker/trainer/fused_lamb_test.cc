#include "worker/trainer/model/fused_lamb.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/trainer/run/checkpoint.h"

namespace tessera::trainer {
namespace {

// ---------------------------------------------------------------------------
// The reference: LAMB written from the paper's equations, one element at a
// time in double precision.

struct ReferenceOptions {
  double lr = 1e-2;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0;
  double max_trust_ratio = 10;
  bool bias_correction = true;
  bool trust_ratio = true;
};

struct ReferenceParam {
  std::vector<double> w;
  std::vector<double> m;
  std::vector<double> v;
};

ReferenceParam ReferenceFrom(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kDouble).contiguous().view(-1);
  ReferenceParam p;
  p.w.assign(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  p.m.assign(p.w.size(), 0.0);
  p.v.assign(p.w.size(), 0.0);
  return p;
}

// Step t (from 1) of one parameter tensor with gradient g.
void ReferenceStep(ReferenceParam& p, const std::vector<double>& g, int t,
                   const ReferenceOptions& o) {
  const double bias1 = o.bias_correction ? 1 - std::pow(o.beta1, t) : 1;
  const double bias2 = o.bias_correction ? 1 - std::pow(o.beta2, t) : 1;
  std::vector<double> update(p.w.size());
  double w_norm = 0;
  double u_norm = 0;
  for (size_t i = 0; i < p.w.size(); ++i) {
    p.m[i] = o.beta1 * p.m[i] + (1 - o.beta1) * g[i];
    p.v[i] = o.beta2 * p.v[i] + (1 - o.beta2) * g[i] * g[i];
    const double m_hat = p.m[i] / bias1;
    const double v_hat = p.v[i] / bias2;
    update[i] = m_hat / (std::sqrt(v_hat) + o.eps) + o.weight_decay * p.w[i];
    w_norm += p.w[i] * p.w[i];
    u_norm += update[i] * update[i];
  }
  w_norm = std::sqrt(w_norm);
  u_norm = std::sqrt(u_norm);
  double ratio = 1;
  if (o.trust_ratio && w_norm > 0 && u_norm > 0) {
    ratio = std::min(std::max(w_norm / u_norm, 0.0), o.max_trust_ratio);
  }
  for (size_t i = 0; i < p.w.size(); ++i) p.w[i] -= o.lr * ratio * update[i];
}

std::vector<double> Flat(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kDouble).contiguous().view(-1);
  return {flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()};
}

// ||a - b|| / ||b|| of a tensor against the reference's values.
double RelativeError(const torch::Tensor& a, const std::vector<double>& b) {
  const std::vector<double> values = Flat(a);
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (values[i] - b[i]) * (values[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

// ---------------------------------------------------------------------------
// Helpers for the optimizer under test.

LambOptions ToLamb(const ReferenceOptions& o) {
  return LambOptions(o.lr)
      .betas({o.beta1, o.beta2})
      .eps(o.eps)
      .weight_decay(o.weight_decay)
      .max_trust_ratio(o.max_trust_ratio)
      .bias_correction(o.bias_correction)
      .trust_ratio(o.trust_ratio);
}

// A few small random tensors; the long one spans several of the CPU loop's
// chunks and ends in a partial one.
std::vector<torch::Tensor> RandomParams(torch::ScalarType dtype, int seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params = {torch::randn({12, 7}),
                                       torch::randn({70001}) * 0.05, torch::randn({5}),
                                       torch::randn({3, 4, 2}) * 3};
  for (torch::Tensor& p : params) p = p.to(dtype).requires_grad_(true);
  return params;
}

std::vector<torch::Tensor> Clone(const std::vector<torch::Tensor>& from) {
  std::vector<torch::Tensor> to;
  for (const torch::Tensor& t : from)
    to.push_back(t.detach().clone().requires_grad_(true));
  return to;
}

// Gradient `i` of step `step`, the same for every copy of the parameters.
torch::Tensor GradientFor(const torch::Tensor& p, int step, size_t i) {
  torch::manual_seed(1000 + 31 * step + static_cast<int>(i));
  return (torch::randn(p.sizes()) * (0.1 + static_cast<double>(i))).to(p.scalar_type());
}

void SetGradients(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = GradientFor(params[i], step, i);
  }
}

std::string PathName(LambPath path) {
  return path == LambPath::kCpuLoop ? "CpuLoop" : "Foreach";
}

// ---------------------------------------------------------------------------
// (a) Against the reference.

class LambReferenceTest
    : public ::testing::TestWithParam<std::tuple<LambPath, bool /*bias_correction*/>> {};

TEST_P(LambReferenceTest, MatchesThePapersEquationsOverTwentyStepsWithWeightDecay) {
  const auto [path, bias_correction] = GetParam();
  ReferenceOptions o;
  o.weight_decay = 0.01;
  o.bias_correction = bias_correction;
  std::vector<torch::Tensor> params = RandomParams(torch::kFloat, 3);
  std::vector<ReferenceParam> reference;
  for (const torch::Tensor& p : params) reference.push_back(ReferenceFrom(p));
  FusedLamb lamb(params, ToLamb(o));
  lamb.ForcePath(path);
  for (int step = 1; step <= 20; ++step) {
    SetGradients(params, step);
    lamb.step();
    ASSERT_EQ(lamb.last_step_count(path), static_cast<int>(params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      ReferenceStep(reference[i], Flat(params[i].grad()), step, o);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT(RelativeError(params[i], reference[i].w), 1e-6) << "parameter " << i;
    // The parameters moved: the comparison is not between untouched values.
    EXPECT_GT(
        RelativeError(params[i], ReferenceFrom(RandomParams(torch::kFloat, 3)[i]).w),
        1e-3)
        << "parameter " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    FusedLambTest, LambReferenceTest,
    ::testing::Combine(::testing::Values(LambPath::kCpuLoop, LambPath::kForeach),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<LambReferenceTest::ParamType>& info) {
      return PathName(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "WithBiasCorrection" : "WithoutBiasCorrection");
    });

TEST(FusedLambTest, DoubleParametersMatchTheEquationsToRounding) {
  ReferenceOptions o;
  o.weight_decay = 0.05;
  o.lr = 3e-2;
  std::vector<torch::Tensor> params = RandomParams(torch::kDouble, 4);
  std::vector<ReferenceParam> reference;
  for (const torch::Tensor& p : params) reference.push_back(ReferenceFrom(p));
  FusedLamb lamb(params, ToLamb(o));
  for (int step = 1; step <= 20; ++step) {
    SetGradients(params, step);
    lamb.step();
    EXPECT_EQ(lamb.last_step_count(LambPath::kForeach), static_cast<int>(params.size()))
        << "float64 parameters take the multi-tensor path";
    for (size_t i = 0; i < params.size(); ++i) {
      ReferenceStep(reference[i], Flat(params[i].grad()), step, o);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT(RelativeError(params[i], reference[i].w), 1e-12) << "parameter " << i;
  }
}

// ---------------------------------------------------------------------------
// (b) A group excluded from the trust ratio and decay is Adam.

class LambPathTest : public ::testing::TestWithParam<LambPath> {};

TEST_P(LambPathTest, AnExcludedGroupMovesAsAdamWhileTheOtherGroupDoesNot) {
  std::vector<torch::Tensor> decayed = RandomParams(torch::kFloat, 5);
  std::vector<torch::Tensor> excluded = RandomParams(torch::kFloat, 6);
  std::vector<torch::Tensor> adam_decayed = Clone(decayed);
  std::vector<torch::Tensor> adam_excluded = Clone(excluded);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<LambOptions>(
                                   LambOptions(1e-2).weight_decay(0.05).eps(1e-8)));
  groups.emplace_back(excluded, std::make_unique<LambOptions>(
                                    LambOptions(1e-2).eps(1e-8).trust_ratio(false)));
  FusedLamb lamb(std::move(groups), LambOptions(1e-2));
  lamb.ForcePath(GetParam());
  std::vector<torch::Tensor> adam_params = adam_decayed;
  adam_params.insert(adam_params.end(), adam_excluded.begin(), adam_excluded.end());
  torch::optim::Adam adam(adam_params, torch::optim::AdamOptions(1e-2).eps(1e-8));
  for (int step = 1; step <= 20; ++step) {
    SetGradients(decayed, step);
    SetGradients(adam_decayed, step);
    SetGradients(excluded, step + 100);
    SetGradients(adam_excluded, step + 100);
    lamb.step();
    adam.step();
  }
  for (size_t i = 0; i < excluded.size(); ++i) {
    EXPECT_TRUE(
        torch::allclose(excluded[i], adam_excluded[i], /*rtol=*/1e-6, /*atol=*/1e-7))
        << "parameter " << i << " max diff "
        << (excluded[i] - adam_excluded[i]).abs().max().item<float>();
    EXPECT_FALSE(torch::allclose(decayed[i], adam_decayed[i], 1e-3, 1e-4))
        << "parameter " << i << " of the trust-ratio group moved as Adam";
  }
}

// ---------------------------------------------------------------------------
// (c) The trust ratio's clip and its zero-norm case. With bias correction, the
// first step's update is g / (|g| + eps) per element: +-1 for gradients of +-1.

TEST_P(LambPathTest, TrustRatioIsClippedToMaxTrustRatio) {
  for (const double max_ratio : {10.0, 3.0}) {
    torch::Tensor p = torch::full({4}, 100.0).requires_grad_(true);  // ||w|| = 200
    FusedLamb lamb({p}, LambOptions(1e-2).eps(0).max_trust_ratio(max_ratio));
    lamb.ForcePath(GetParam());
    p.mutable_grad() = torch::tensor({1.0f, -1.0f, 1.0f, -1.0f});  // ||u|| = 2
    lamb.step();
    // ||w|| / ||u|| = 100, clipped.
    const torch::Tensor expected =
        torch::tensor({100.0f, 100.0f, 100.0f, 100.0f}) -
        static_cast<float>(1e-2 * max_ratio) * torch::tensor({1.0f, -1.0f, 1.0f, -1.0f});
    EXPECT_TRUE(torch::allclose(p, expected, 0, 1e-5))
        << "max " << max_ratio << ": " << p;
  }
}

// A floor (DeepSpeed's 0.01; trainer.lamb_min_trust) lifts a ratio below it.
TEST_P(LambPathTest, TrustRatioBelowTheFloorIsLiftedToIt) {
  for (const double floor : {0.0, 0.5}) {
    torch::Tensor p = torch::full({4}, 0.25).requires_grad_(true);  // ||w|| = 0.5
    FusedLamb lamb({p}, LambOptions(1e-2).eps(0).min_trust_ratio(floor));
    lamb.ForcePath(GetParam());
    p.mutable_grad() = torch::tensor({1.0f, 1.0f, -1.0f, -1.0f});  // ||u|| = 2
    lamb.step();
    const float ratio = static_cast<float>(std::max(0.25, floor));
    const torch::Tensor expected =
        torch::tensor({0.25f, 0.25f, 0.25f, 0.25f}) -
        1e-2f * ratio * torch::tensor({1.0f, 1.0f, -1.0f, -1.0f});
    EXPECT_TRUE(torch::allclose(p, expected, 0, 1e-7)) << "floor " << floor << ": " << p;
  }
}

TEST_P(LambPathTest, TrustRatioBelowTheClipScalesTheStep) {
  torch::Tensor p = torch::full({4}, 0.25).requires_grad_(true);  // ||w|| = 0.5
  FusedLamb lamb({p}, LambOptions(1e-2).eps(0));
  lamb.ForcePath(GetParam());
  p.mutable_grad() = torch::tensor({1.0f, 1.0f, -1.0f, -1.0f});  // ||u|| = 2
  lamb.step();
  const torch::Tensor expected =
      torch::tensor({0.25f, 0.25f, 0.25f, 0.25f}) -
      1e-2f * 0.25f * torch::tensor({1.0f, 1.0f, -1.0f, -1.0f});
  EXPECT_TRUE(torch::allclose(p, expected, 0, 1e-7)) << p;
}

TEST_P(LambPathTest, ZeroParameterNormGivesTrustRatioOne) {
  torch::Tensor p = torch::zeros({4}).requires_grad_(true);
  FusedLamb lamb({p}, LambOptions(1e-2).eps(0).weight_decay(0.1));
  lamb.ForcePath(GetParam());
  p.mutable_grad() = torch::tensor({2.0f, -2.0f, 0.5f, -0.5f});
  lamb.step();
  const torch::Tensor expected = -1e-2f * torch::tensor({1.0f, -1.0f, 1.0f, -1.0f});
  EXPECT_TRUE(torch::allclose(p, expected, 0, 1e-7)) << p;
}

TEST_P(LambPathTest, ZeroUpdateNormGivesTrustRatioOneAndNoNaN) {
  torch::Tensor p = torch::full({4}, 3.0).requires_grad_(true);
  FusedLamb lamb({p}, LambOptions(1e-2));  // no weight decay
  lamb.ForcePath(GetParam());
  p.mutable_grad() = torch::zeros({4});  // u = 0 / (0 + eps) = 0
  lamb.step();
  EXPECT_TRUE(torch::equal(p, torch::full({4}, 3.0))) << p;
  // A gradient after the zero one: the state stayed finite.
  p.mutable_grad() = torch::ones({4});
  lamb.step();
  EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << p;
  EXPECT_TRUE(torch::all(p < 3.0).item<bool>()) << p;
}

// ---------------------------------------------------------------------------
// (d) The state's save/load round trip.

TEST_P(LambPathTest, SavedStateContinuesLikeTheUninterruptedRun) {
  const LambOptions options = LambOptions(1e-2).weight_decay(0.01);
  std::vector<torch::Tensor> straight = RandomParams(torch::kFloat, 7);
  std::vector<torch::Tensor> interrupted = Clone(straight);
  FusedLamb straight_lamb(straight, options);
  FusedLamb interrupted_lamb(interrupted, options);
  straight_lamb.ForcePath(GetParam());
  interrupted_lamb.ForcePath(GetParam());
  for (int step = 1; step <= 5; ++step) {
    SetGradients(straight, step);
    SetGradients(interrupted, step);
    straight_lamb.step();
    interrupted_lamb.step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    interrupted_lamb.save(archive);
    archive.save_to(saved);
  }
  // A fresh optimizer over copies of the parameters resumes from the bytes.
  std::vector<torch::Tensor> resumed = Clone(interrupted);
  FusedLamb resumed_lamb(resumed, options);
  resumed_lamb.ForcePath(GetParam());
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    resumed_lamb.load(archive);
  }
  for (int step = 6; step <= 10; ++step) {
    SetGradients(straight, step);
    SetGradients(resumed, step);
    straight_lamb.step();
    resumed_lamb.step();
  }
  // Bias correction went on from step 5, and the moments came back: the same
  // bits as never stopping.
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_TRUE(torch::equal(straight[i], resumed[i]))
        << "parameter " << i << " max diff "
        << (straight[i] - resumed[i]).abs().max().item<float>();
  }
}

INSTANTIATE_TEST_SUITE_P(FusedLambTest, LambPathTest,
                         ::testing::Values(LambPath::kCpuLoop, LambPath::kForeach),
                         [](const ::testing::TestParamInfo<LambPath>& info) {
                           return PathName(info.param);
                         });

std::string FreshDirectory(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(FusedLambTest, TrainerCheckpointFilesHoldTheLambState) {
  const CheckpointDirectory dir(FreshDirectory("lamb-checkpoint"));
  torch::manual_seed(1);
  torch::nn::Linear model(6, 3);
  FusedLamb optimizer(model->parameters(), LambOptions(0.1).weight_decay(0.01));
  const torch::Tensor input = torch::randn({8, 6});
  auto train_step = [&](torch::nn::Linear& m, FusedLamb& o) {
    o.zero_grad();
    m->forward(input).square().mean().backward();
    o.step();
  };
  for (int i = 0; i < 3; ++i) train_step(model, optimizer);
  RankCheckpoint state;
  state.position = {3, 0, 3};
  ASSERT_TRUE(SaveCheckpointFiles(dir, state, *model, optimizer).ok());

  torch::manual_seed(2);
  torch::nn::Linear restored(6, 3);
  FusedLamb restored_optimizer(restored->parameters(),
                               LambOptions(0.1).weight_decay(0.01));
  absl::StatusOr<RankCheckpoint> loaded =
      LoadCheckpointFiles(dir, 3, 0, 1, *restored, restored_optimizer);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int i = 0; i < 3; ++i) {
    train_step(model, optimizer);
    train_step(restored, restored_optimizer);
  }
  EXPECT_TRUE(torch::equal(restored->weight, model->weight));
  EXPECT_TRUE(torch::equal(restored->bias, model->bias));
}

TEST(FusedLambTest, AnAdamWCheckpointDoesNotLoadIntoLamb) {
  torch::Tensor p = torch::randn({3}).requires_grad_(true);
  torch::optim::AdamW adamw({p});
  p.mutable_grad() = torch::ones({3});
  adamw.step();
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    adamw.save(archive);
    archive.save_to(saved);
  }
  FusedLamb lamb({p});
  torch::serialize::InputArchive archive;
  archive.load_from(saved);
  EXPECT_THROW(lamb.load(archive), c10::Error);
}

TEST(FusedLambTest, RejectsANonPositiveMaxTrustRatio) {
  torch::Tensor p = torch::randn({3}).requires_grad_(true);
  EXPECT_THROW(FusedLamb({p}, LambOptions(1e-3).max_trust_ratio(0)), c10::Error);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p},
                      std::make_unique<LambOptions>(LambOptions(1e-3).betas({0.9, 1.0})));
  EXPECT_THROW(FusedLamb(std::move(groups), LambOptions(1e-3)), c10::Error);
}

TEST(FusedLambTest, ParametersWithoutAGradientKeepTheirValueAndGetNoState) {
  torch::Tensor with = torch::randn({3}).requires_grad_(true);
  torch::Tensor without = torch::randn({3}).requires_grad_(true);
  const torch::Tensor before = without.detach().clone();
  FusedLamb lamb(std::vector<torch::Tensor>{with, without}, LambOptions(1e-2));
  with.mutable_grad() = torch::ones({3});
  lamb.step();
  EXPECT_TRUE(torch::equal(without, before));
  EXPECT_EQ(lamb.state().size(), 1u);
  EXPECT_EQ(lamb.last_step_count(LambPath::kCpuLoop), 1);
}

}  // namespace
}  // namespace tessera::trainer
