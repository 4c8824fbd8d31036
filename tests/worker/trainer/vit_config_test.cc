#include "worker/trainer/vit_config.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

TEST(ViTConfigTest, EveryPresetIsValid) {
  ASSERT_GE(ViTPresets().size(), 4u);
  for (const ViTPreset& preset : ViTPresets()) {
    EXPECT_TRUE(ValidateViTConfig(preset.config).ok()) << preset.name;
  }
}

// Published parameter counts of the ImageNet-1k models with these shapes:
// torchvision vit_b_16 86,567,656; DeiT-S (ViT-S/16) 22,050,664; DeiT-Ti 5,717,416.
TEST(ViTConfigTest, SixteenPixelPresetsHaveTheirPublishedParameterCounts) {
  EXPECT_EQ(ViTParameterCount(*FindViTPreset("vit-b16")), 86'567'656);
  EXPECT_EQ(ViTParameterCount(*FindViTPreset("vit-s16")), 22'050'664);
  EXPECT_EQ(ViTParameterCount(*FindViTPreset("vit-ti16")), 5'717'416);
}

TEST(ViTConfigTest, MicroPresetFitsFashionMnist) {
  const absl::StatusOr<ViTConfig> micro = ResolveViTConfig("vit-micro", 1, 10);
  ASSERT_TRUE(micro.ok()) << micro.status();
  EXPECT_EQ(micro->image_size, 28);
  EXPECT_EQ(28 % micro->patch_size, 0);
  EXPECT_LT(ViTParameterCount(*micro), 1'000'000);
}

TEST(ViTConfigTest, ResolveTakesChannelsAndClassesFromTheData) {
  const absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-b16", 1, 10);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->in_channels, 1);
  EXPECT_EQ(config->num_classes, 10);
  EXPECT_EQ(config->image_size, 224);
  EXPECT_EQ(config->dim, 768);
}

TEST(ViTConfigTest, UnknownPresetIsNotFoundAndListsTheKnownOnes) {
  const absl::StatusOr<ViTConfig> config = FindViTPreset("vit-l16");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr("vit-micro"));
}

TEST(ViTConfigTest, RejectsShapesThatDoNotDivide) {
  ViTConfig config;
  config.image_size = 30;
  config.patch_size = 4;
  EXPECT_THAT(ValidateViTConfig(config).message(), HasSubstr("multiple of patch"));
  config = ViTConfig();
  config.dim = 66;
  config.heads = 4;
  EXPECT_THAT(ValidateViTConfig(config).message(), HasSubstr("multiple of heads"));
  config = ViTConfig();
  config.dropout = 1.0;
  EXPECT_EQ(ValidateViTConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
