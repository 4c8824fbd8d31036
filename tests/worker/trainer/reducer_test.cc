#include "worker/trainer/dist/reducer.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/gloo_group.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/gloo_communicator.h"

namespace tessera::trainer {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// One byte in MiB: bucket caps small enough to split the test model's gradients
// (6 tensors, 1,936 bytes) into four buckets.
constexpr double kBytes = 1.0 / (1024 * 1024);

torch::nn::Sequential MakeModel(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 4));
}

// Deterministic, rank-dependent inputs without touching the global generator.
torch::Tensor Input(int rank, int which = 0) {
  return torch::arange(0, 5 * 8, torch::kFloat)
      .reshape({5, 8})
      .mul(0.37 + 0.11 * rank + 0.05 * which)
      .sin();
}

// The gradients of `model` (copied out) for the mean output of `input`.
std::vector<torch::Tensor> Gradients(torch::nn::Sequential& model,
                                     const torch::Tensor& input) {
  for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  model->forward(input).square().mean().backward();
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : model->parameters()) grads.push_back(p.grad().clone());
  for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  return grads;
}

ReducerOptions SmallBuckets(bool overlap = true) {
  ReducerOptions options;
  options.first_bucket_mb = 80 * kBytes;
  options.bucket_cap_mb = 600 * kBytes;
  options.overlap = overlap;
  return options;
}

// A Gloo group of `world` ranks on loopback (see gloo_group.h).
void RunGroup(int world, const std::function<void(int, Communicator&)>& body) {
  testing::RunGlooGroup(world, body, kTimeout);
}

TEST(ReducerTest, WithoutGradientViewsAWorldOfOneKeepsLibTorchsOwnGradients) {
  torch::nn::Sequential model = MakeModel(1);
  const std::vector<torch::Tensor> expected = Gradients(model, Input(0));
  LocalCommunicator communicator;
  ReducerOptions options = SmallBuckets();
  options.gradient_views = false;
  auto reducer = Reducer::Create(model->parameters(), communicator, options);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  ASSERT_TRUE((*reducer)->BroadcastParameters(0).ok());
  const std::vector<torch::Tensor> parameters = model->parameters();
  for (const torch::Tensor& p : parameters) EXPECT_FALSE(p.grad().defined());

  (*reducer)->PrepareForBackward(false);
  model->forward(Input(0)).square().mean().backward();
  ASSERT_TRUE((*reducer)->FinishBackward(0.5).ok());
  // The gradients are backward's own tensors, not views into shared buffers,
  // and they are what gradient_buffers() hands out for clipping and checks.
  const std::vector<torch::Tensor> gradients = (*reducer)->gradient_buffers();
  ASSERT_EQ(gradients.size(), parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const torch::Tensor& grad = parameters[i].grad();
    ASSERT_TRUE(grad.defined());
    EXPECT_EQ(grad.storage().nbytes(), static_cast<size_t>(grad.numel()) * sizeof(float))
        << "parameter " << i << "'s gradient shares a buffer";
    EXPECT_EQ(gradients[i].data_ptr(), grad.data_ptr());
    EXPECT_TRUE(torch::allclose(grad, expected[i] * 0.5)) << "parameter " << i;
  }
  // zero_grad(set_to_none=True): dropped, and the next backward starts afresh.
  (*reducer)->ZeroGradients();
  for (const torch::Tensor& p : parameters) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE((*reducer)->gradient_buffers().empty());
  (*reducer)->PrepareForBackward(false);
  model->forward(Input(0)).square().mean().backward();
  ASSERT_TRUE((*reducer)->FinishBackward().ok());
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(parameters[i].grad(), expected[i])) << "parameter " << i;
  }
}

TEST(ReducerTest, GradientsAccumulateStraightIntoTheBucketBuffers) {
  torch::nn::Sequential model = MakeModel(1);
  const std::vector<torch::Tensor> expected = Gradients(model, Input(0));
  LocalCommunicator communicator;
  auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  ASSERT_GE((*reducer)->plan().buckets.size(), 3u);

  (*reducer)->PrepareForBackward(true);
  model->forward(Input(0)).square().mean().backward();
  ASSERT_TRUE((*reducer)->FinishBackward().ok());

  const std::vector<torch::Tensor> parameters = model->parameters();
  const BucketPlan& plan = (*reducer)->plan();
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(parameters[i].grad(), expected[i])) << "parameter " << i;
    // The gradient is the bucket's memory, not a copy of it.
    const torch::Tensor& buffer =
        (*reducer)->gradient_buffers()[static_cast<size_t>(plan.bucket_of[i])];
    const BucketSlot& slot = plan.buckets[static_cast<size_t>(plan.bucket_of[i])]
                                 .slots[static_cast<size_t>(plan.slot_of[i])];
    EXPECT_EQ(parameters[i].grad().data_ptr(),
              static_cast<void*>(buffer.data_ptr<float>() + slot.offset));
  }
  (*reducer)->ZeroGradients();
  for (const torch::Tensor& p : parameters)
    EXPECT_EQ(p.grad().abs().sum().item<float>(), 0);
}

TEST(ReducerTest, TwoRanksAverageGradientsInBucketsLaunchedDuringBackward) {
  // Both ranks start from the same model; each computes the reference average.
  std::vector<torch::nn::Sequential> models = {MakeModel(1), MakeModel(1)};
  const std::vector<torch::Tensor> g0 = Gradients(models[0], Input(0));
  const std::vector<torch::Tensor> g1 = Gradients(models[0], Input(1));
  std::vector<int> launched(2, -1);
  std::vector<size_t> buckets(2, 0);
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->PrepareForBackward(true);
    model->forward(Input(rank)).square().mean().backward();
    launched[static_cast<size_t>(rank)] = (*reducer)->launched_during_backward();
    buckets[static_cast<size_t>(rank)] = (*reducer)->plan().buckets.size();
    ASSERT_TRUE((*reducer)->FinishBackward().ok());
    const std::vector<torch::Tensor> parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(torch::allclose(parameters[i].grad(), (g0[i] + g1[i]) / 2, 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i;
    }
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GE(buckets[static_cast<size_t>(rank)], 3u);
    // Every bucket filled during backward and went out from its hooks.
    EXPECT_EQ(launched[static_cast<size_t>(rank)],
              static_cast<int>(buckets[static_cast<size_t>(rank)]));
  }
}

// The preemption vote rides the gradient all-reduce: no collective of its own,
// the sum arrives unscaled, and the gradients are untouched by it.
TEST(ReducerTest, TheControlWordIsSummedWithTheGradientsAtNoExtraCollective) {
  std::vector<torch::nn::Sequential> models = {MakeModel(1), MakeModel(1)};
  const std::vector<torch::Tensor> g0 = Gradients(models[0], Input(0));
  const std::vector<torch::Tensor> g1 = Gradients(models[0], Input(1));
  std::vector<float> sums(2, -1);
  std::vector<uint64_t> collectives(2, 0);
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    const uint64_t issued_before = communicator.collectives()->issued();
    (*reducer)->ZeroGradients();
    if (rank == 1) (*reducer)->SetControlWord(1.0f);
    (*reducer)->PrepareForBackward(true);
    model->forward(Input(rank)).square().mean().backward();
    ASSERT_TRUE((*reducer)->FinishBackward().ok());
    sums[static_cast<size_t>(rank)] = (*reducer)->control_word().item<float>();
    collectives[static_cast<size_t>(rank)] =
        communicator.collectives()->issued() - issued_before;
    const std::vector<torch::Tensor> parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(torch::allclose(parameters[i].grad(), (g0[i] + g1[i]) / 2, 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i;
    }
    const BucketPlan& plan = (*reducer)->plan();
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      EXPECT_EQ((*reducer)->gradient_buffers()[b].numel(), plan.buckets[b].numel);
    }
    collectives[static_cast<size_t>(rank)] -= plan.buckets.size();
    (*reducer)->ZeroGradients();
    EXPECT_EQ((*reducer)->control_word().item<float>(), 0);
  });
  EXPECT_EQ(sums, std::vector<float>({1.0f, 1.0f}));
  EXPECT_EQ(collectives, std::vector<uint64_t>({0, 0}));  // one per bucket, no more
}

// ZeRO stages 1 and 2: after backward each rank holds its shard of each
// bucket's averaged gradients (reduce-scattered), and the control word is
// still summed. At stage 2 the bucket buffers are gone (the parameters have
// no .grad until the next backward); at stage 1 they stay.
void ExpectShardsOfTheAverage(int stage) {
  std::vector<torch::nn::Sequential> models = {MakeModel(1), MakeModel(1)};
  const std::vector<torch::Tensor> g0 = Gradients(models[0], Input(0));
  const std::vector<torch::Tensor> g1 = Gradients(models[0], Input(1));
  std::vector<float> sums(2, -1);
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    ReducerOptions options = SmallBuckets();
    options.zero_stage = stage;
    auto reducer = Reducer::Create(model->parameters(), communicator, options);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->ZeroGradients();
    if (rank == 0) (*reducer)->SetControlWord(1.0f);
    (*reducer)->PrepareForBackward(true);
    model->forward(Input(rank)).square().mean().backward();
    ASSERT_TRUE((*reducer)->FinishBackward().ok());
    sums[static_cast<size_t>(rank)] = (*reducer)->control_word().item<float>();
    const std::vector<torch::Tensor> parameters = model->parameters();
    const BucketPlan& plan = (*reducer)->plan();
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      // The whole bucket's average, flattened as the plan lays it out.
      torch::Tensor whole = torch::zeros({plan.buckets[b].numel});
      for (const BucketSlot& slot : plan.buckets[b].slots) {
        const auto i = static_cast<size_t>(slot.param);
        whole.narrow(0, slot.offset, slot.numel)
            .copy_(((g0[i] + g1[i]) / 2).reshape({-1}));
      }
      const ShardRange shard = ShardOf(plan.buckets[b].numel, 2, rank);
      const torch::Tensor& kept = (*reducer)->gradient_buffers()[b];
      ASSERT_EQ(kept.numel(), shard.size());
      EXPECT_TRUE(
          torch::allclose(kept, whole.narrow(0, shard.begin, shard.size()), 1e-5, 1e-6))
          << "rank " << rank << " bucket " << b;
    }
    for (const torch::Tensor& p : parameters) {
      EXPECT_EQ(p.grad().defined(), stage == 1) << "stage " << stage;
    }
  });
  EXPECT_EQ(sums, std::vector<float>({1.0f, 1.0f}));
}

TEST(ReducerTest, StageOneReduceScattersAndKeepsTheBuckets) {
  ExpectShardsOfTheAverage(1);
}

TEST(ReducerTest, StageTwoKeepsOnlyTheRanksShardOfTheAverage) {
  ExpectShardsOfTheAverage(2);
}

TEST(ReducerTest, WithoutOverlapAllBucketsGoOutAfterBackwardWithTheSameResult) {
  std::vector<torch::nn::Sequential> models = {MakeModel(2), MakeModel(2)};
  const std::vector<torch::Tensor> g0 = Gradients(models[0], Input(0));
  const std::vector<torch::Tensor> g1 = Gradients(models[0], Input(1));
  std::vector<int> launched(2, -1);
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    auto reducer = Reducer::Create(model->parameters(), communicator,
                                   SmallBuckets(/*overlap=*/false));
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->PrepareForBackward(true);
    model->forward(Input(rank)).square().mean().backward();
    launched[static_cast<size_t>(rank)] = (*reducer)->launched_during_backward();
    ASSERT_TRUE((*reducer)->FinishBackward().ok());
    const std::vector<torch::Tensor> parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(torch::allclose(parameters[i].grad(), (g0[i] + g1[i]) / 2, 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i;
    }
  });
  EXPECT_EQ(launched[0], 0);
  EXPECT_EQ(launched[1], 0);
}

TEST(ReducerTest, AParameterWithoutAGradientDoesNotBlockTheGroup) {
  // Rank 1 also trains an extra layer that rank 0 leaves unused this step.
  std::vector<torch::nn::Sequential> models = {MakeModel(3), MakeModel(3)};
  std::vector<torch::nn::Linear> extras = {torch::nn::Linear(4, 4),
                                           torch::nn::Linear(4, 4)};
  extras[1]->weight.data().copy_(extras[0]->weight.data());
  extras[1]->bias.data().copy_(extras[0]->bias.data());
  const torch::Tensor extra_input = torch::ones({2, 4});
  torch::Tensor expected_extra_grad;
  {
    torch::nn::Linear reference(4, 4);
    reference->weight.data().copy_(extras[0]->weight.data());
    reference->bias.data().copy_(extras[0]->bias.data());
    reference->forward(extra_input).sum().backward();
    expected_extra_grad = reference->weight.grad() / 2;  // (0 + g) / 2
  }
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    torch::nn::Linear& extra = extras[static_cast<size_t>(rank)];
    std::vector<torch::Tensor> parameters = model->parameters();
    for (const torch::Tensor& p : extra->parameters()) parameters.push_back(p);
    auto reducer = Reducer::Create(parameters, communicator, SmallBuckets());
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->PrepareForBackward(true);
    torch::Tensor loss = model->forward(Input(rank)).square().mean();
    if (rank == 1) loss = loss + extra->forward(extra_input).sum();
    loss.backward();
    ASSERT_TRUE((*reducer)->FinishBackward().ok()) << "rank " << rank;
    EXPECT_TRUE(torch::allclose(extra->weight.grad(), expected_extra_grad))
        << "rank " << rank;
  });
}

TEST(ReducerTest, NonSynchronizingPassesAccumulateLocallyUntilTheLastOne) {
  std::vector<torch::nn::Sequential> models = {MakeModel(4), MakeModel(4)};
  std::vector<std::vector<torch::Tensor>> g(4);  // [rank * 2 + micro-batch]
  for (int rank = 0; rank < 2; ++rank) {
    for (int micro = 0; micro < 2; ++micro) {
      g[static_cast<size_t>(rank * 2 + micro)] = Gradients(models[0], Input(rank, micro));
    }
  }
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    (*reducer)->PrepareForBackward(false);
    model->forward(Input(rank, 0)).square().mean().backward();
    EXPECT_EQ((*reducer)->launched_during_backward(), 0);
    (*reducer)->PrepareForBackward(true);
    model->forward(Input(rank, 1)).square().mean().backward();
    ASSERT_TRUE((*reducer)->FinishBackward().ok());
    const std::vector<torch::Tensor> parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const torch::Tensor expected = (g[0][i] + g[1][i] + g[2][i] + g[3][i]) / 2;
      EXPECT_TRUE(torch::allclose(parameters[i].grad(), expected, 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i;
    }
  });
}

TEST(ReducerTest, FinishBackwardAppliesTheGradientScale) {
  torch::nn::Sequential model = MakeModel(5);
  const std::vector<torch::Tensor> expected = Gradients(model, Input(0));
  LocalCommunicator communicator;
  auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
  ASSERT_TRUE(reducer.ok());
  (*reducer)->PrepareForBackward(false);
  model->forward(Input(0)).square().mean().backward();
  ASSERT_TRUE((*reducer)->FinishBackward(0.25).ok());
  const std::vector<torch::Tensor> parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(parameters[i].grad(), expected[i] * 0.25));
  }
}

TEST(ReducerTest, BroadcastMakesRankZerosParametersEveryones) {
  std::vector<torch::nn::Sequential> models = {MakeModel(6), MakeModel(7)};
  std::vector<torch::Tensor> rank0;
  for (const torch::Tensor& p : models[0]->parameters())
    rank0.push_back(p.detach().clone());
  RunGroup(2, [&](int rank, Communicator& communicator) {
    torch::nn::Sequential& model = models[static_cast<size_t>(rank)];
    auto reducer = Reducer::Create(model->parameters(), communicator, SmallBuckets());
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    ASSERT_TRUE((*reducer)->BroadcastParameters(0).ok());
    const std::vector<torch::Tensor> parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(torch::equal(parameters[i], rank0[i])) << "rank " << rank;
      EXPECT_EQ(parameters[i].grad().abs().sum().item<float>(), 0);
    }
  });
}

TEST(ReducerTest, RejectsParametersItCannotBucket) {
  LocalCommunicator communicator;
  EXPECT_EQ(
      Reducer::Create({torch::zeros({3}, torch::kDouble).requires_grad_()}, communicator)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reducer::Create({torch::zeros({3})}, communicator).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
