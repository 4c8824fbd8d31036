#include "worker/trainer/run/trainer_options.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

TEST(TrainerOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateTrainerOptions(TrainerOptions()).ok());
  EXPECT_TRUE(
      ValidateLaunchOptions(LaunchOptions(), /*coordinator_supported=*/true).ok());
}

TEST(TrainerOptionsTest, RejectsOutOfRangeValuesNamingTheFlag) {
  struct Case {
    void (*mutate)(TrainerOptions&);
    const char* flag;
  };
  const Case cases[] = {
      {[](TrainerOptions& o) { o.batch_size = 0; }, "--batch-size"},
      {[](TrainerOptions& o) { o.epochs = 0; }, "--epochs"},
      {[](TrainerOptions& o) { o.max_steps = -1; }, "--max-steps"},
      {[](TrainerOptions& o) { o.lr = 0; }, "--lr"},
      {[](TrainerOptions& o) { o.lr = std::numeric_limits<double>::infinity(); }, "--lr"},
      {[](TrainerOptions& o) { o.train_subset = -5; }, "--train-subset"},
      {[](TrainerOptions& o) { o.test_subset = -5; }, "--test-subset"},
      {[](TrainerOptions& o) { o.metrics_every = 0; }, "--metrics-every"},
      {[](TrainerOptions& o) { o.threads = -1; }, "--threads"},
      {[](TrainerOptions& o) { o.weight_decay = -0.1; }, "--weight-decay"},
      {[](TrainerOptions& o) { o.model = "resnet"; }, "--model"},
      {[](TrainerOptions& o) { o.dataset = "imagenet"; }, "--dataset"},
  };
  for (const Case& c : cases) {
    TrainerOptions options;
    c.mutate(options);
    const absl::Status status = ValidateTrainerOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(status.message(), HasSubstr(c.flag));
  }
}

TEST(TrainerOptionsTest, AMalformedFaultHookIsAUsageErrorNamingTheFlag) {
  TrainerOptions options;
  options.fault = "hang:rank=1,phase=data";
  const absl::Status status = ValidateTrainerOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--fault \"hang:rank=1,phase=data\""));
  EXPECT_THAT(status.message(), HasSubstr("hang needs step="));
  options.fault = "hang:rank=1,step=3,phase=data";
  EXPECT_TRUE(ValidateTrainerOptions(options).ok());
}

TEST(TrainerOptionsTest, ZeroStageOutsideTheChoicesIsRefusedNamingThem) {
  for (const int stage : {-1, 4}) {
    TrainerOptions options;
    options.zero_stage = stage;
    const absl::Status status = ValidateTrainerOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << stage;
    EXPECT_THAT(status.message(), HasSubstr("--zero-stage must be one of 0, 1, 2, 3"));
  }
  for (const int stage : {0, 1, 2, 3}) {
    TrainerOptions options;
    options.zero_stage = stage;
    EXPECT_TRUE(ValidateTrainerOptions(options).ok()) << stage;
  }
}

TEST(TrainerOptionsTest, ZeroStageNeedsGradientAveraging) {
  TrainerOptions options;
  options.zero_stage = 1;
  options.allreduce = false;
  const absl::Status status = ValidateTrainerOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--allreduce"));
}

TEST(TrainerOptionsTest, UnknownModelListsKnownPresets) {
  TrainerOptions options;
  options.model = "vit-huge";
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("vit-b16"));
}

TEST(TrainerOptionsTest, ZeroThreadsMeansTheDefaultOfOne) {
  TrainerOptions options;
  options.threads = 0;
  EXPECT_TRUE(ValidateTrainerOptions(options).ok());
  EXPECT_EQ(EffectiveThreads(options), 1);
  options.threads = 3;
  EXPECT_EQ(EffectiveThreads(options), 3);
}

TEST(TrainerOptionsTest, EitherInterpolationResizesEveryDataset) {
  for (const char* dataset : {"fashion-mnist", "cifar10", "synthetic", "imagefolder"}) {
    for (const char* interpolation : {"bilinear", "bicubic"}) {
      TrainerOptions options;
      options.dataset = dataset;
      options.data_dir = "/data";
      options.interpolation = interpolation;
      EXPECT_TRUE(ValidateTrainerOptions(options).ok())
          << dataset << " " << interpolation << ": " << ValidateTrainerOptions(options);
    }
  }
  TrainerOptions options;
  EXPECT_EQ(EffectiveInterpolation(options), data::Interpolation::kBilinear);
  options.interpolation = "bicubic";
  EXPECT_EQ(EffectiveInterpolation(options), data::Interpolation::kBicubic);
  options.interpolation = "lanczos";
  const absl::Status status = ValidateTrainerOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--interpolation"));
}

TEST(TrainerOptionsTest, EvalOnlyNeedsNoLearningRateButOneModelSource) {
  TrainerOptions options;
  options.lr = 0;
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("--lr"));
  options.eval_only = true;
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("needs a model"));
  options.init_from = "/models/vit.safetensors";
  EXPECT_TRUE(ValidateTrainerOptions(options).ok());
  options.resume = true;
  options.checkpoint_dir = "/ckpt/run";
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("not both"));
  options.init_from.clear();
  options.eval_step = 40;
  EXPECT_TRUE(ValidateTrainerOptions(options).ok());
  options.eval_split = "holdout";
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("--eval-split"));
}

TEST(TrainerOptionsTest, EvalStepOnlyPicksTheCheckpointOfAnEvaluation) {
  TrainerOptions options;
  options.eval_step = 10;
  EXPECT_THAT(ValidateTrainerOptions(options).message(), HasSubstr("--eval-step"));
}

TEST(LaunchOptionsTest, MultipleRanksNeedACoordinatorOrStore) {
  LaunchOptions launch;
  launch.world_size = 2;
  const absl::Status status = ValidateLaunchOptions(launch, true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--coordinator"));
  launch.coordinator = "127.0.0.1:50051";
  EXPECT_TRUE(ValidateLaunchOptions(launch, true).ok());
  launch.coordinator.clear();
  launch.rendezvous_store = "127.0.0.1:29500";
  EXPECT_TRUE(ValidateLaunchOptions(launch, true).ok());
}

TEST(LaunchOptionsTest, RejectsRankOutsideTheWorld) {
  LaunchOptions launch;
  launch.coordinator = "localhost:1";
  launch.world_size = 2;
  launch.rank = 2;
  EXPECT_THAT(ValidateLaunchOptions(launch, true).message(), HasSubstr("--rank"));
  launch.rank = 1;
  launch.local_rank = 5;
  EXPECT_THAT(ValidateLaunchOptions(launch, true).message(), HasSubstr("--local-rank"));
}

TEST(LaunchOptionsTest, RejectsMalformedCoordinatorAddress) {
  LaunchOptions launch;
  for (const char* bad : {"nohost", "host:", ":50051", "host:70000", "host:0"}) {
    launch.coordinator = bad;
    const absl::Status status = ValidateLaunchOptions(launch, true);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("--coordinator")) << bad;
  }
}

TEST(LaunchOptionsTest, BuildWithoutGrpcRejectsCoordinator) {
  LaunchOptions launch;
  launch.coordinator = "127.0.0.1:50051";
  const absl::Status status =
      ValidateLaunchOptions(launch, /*coordinator_supported=*/false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("without gRPC"));
}

TEST(LaunchOptionsTest, CollectiveTimeoutMustBeBetweenASecondAndADay) {
  LaunchOptions launch;
  for (const absl::Duration bad :
       {absl::ZeroDuration(), absl::Milliseconds(999), absl::Hours(25)}) {
    launch.collective_timeout = bad;
    const absl::Status status = ValidateLaunchOptions(launch, true);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("--collective-timeout")) << bad;
  }
  launch.collective_timeout = absl::Seconds(1);
  EXPECT_TRUE(ValidateLaunchOptions(launch, true).ok());
}

TEST(LaunchOptionsTest, StaticStoreNeedsAFixedPort) {
  LaunchOptions launch;
  launch.rendezvous_store = "127.0.0.1:0";
  EXPECT_THAT(ValidateLaunchOptions(launch, true).message(), HasSubstr("fixed port"));
}

}  // namespace
}  // namespace tessera::trainer
