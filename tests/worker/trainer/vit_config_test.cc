#include "worker/trainer/model/vit_config.h"

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

// torchvision's vit_l_16: 304,326,632 parameters; patch 16, width 1024, 24
// blocks of 16 heads, MLP 4096.
TEST(ViTConfigTest, VitL16PresetIsViTLargeWithItsPublishedParameterCount) {
  const absl::StatusOr<ViTConfig> l16 = FindViTPreset("vit-l16");
  ASSERT_TRUE(l16.ok()) << l16.status();
  EXPECT_EQ(l16->patch_size, 16);
  EXPECT_EQ(l16->dim, 1024);
  EXPECT_EQ(l16->depth, 24);
  EXPECT_EQ(l16->heads, 16);
  EXPECT_EQ(l16->mlp_dim, 4096);
  EXPECT_EQ(ViTParameterCount(*l16), 304'326'632);
  // The example's shape (zero3-vit-l.yaml): 32 px, 10 classes; about 303M.
  const absl::StatusOr<ViTConfig> at32 = ResolveViTConfig("vit-l16", 3, 10, 32);
  ASSERT_TRUE(at32.ok()) << at32.status();
  EXPECT_EQ(at32->num_patches(), 4);
  EXPECT_NEAR(static_cast<double>(ViTParameterCount(*at32)), 303.1e6, 0.1e6);
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

TEST(ViTConfigTest, CifarPresetsTakeThirtyTwoPixelImagesInSixtyFourPatches) {
  for (const char* name : {"vit-cifar-tiny", "vit-cifar-small"}) {
    const absl::StatusOr<ViTConfig> config = ResolveViTConfig(name, 3, 100);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(config->image_size, 32) << name;
    EXPECT_EQ(config->num_patches(), 64) << name;
    EXPECT_EQ(config->num_classes, 100) << name;
  }
  // Small enough for CPU training, and ordered by size.
  const int64_t tiny = ViTParameterCount(*ResolveViTConfig("vit-cifar-tiny", 3, 10));
  const int64_t small = ViTParameterCount(*ResolveViTConfig("vit-cifar-small", 3, 10));
  EXPECT_EQ(tiny, 1'806'538);
  EXPECT_EQ(small, 3'722'250);  // ViT-Lite-7/4
}

TEST(ViTConfigTest, ImageSizeOverridesThePresetsAndChangesOnlyPositions) {
  // The paper's setting: ViT-B/16 on CIFAR-10 resized to 224 px.
  const absl::StatusOr<ViTConfig> b16 = ResolveViTConfig("vit-b16", 3, 10, 224);
  ASSERT_TRUE(b16.ok()) << b16.status();
  EXPECT_EQ(b16->image_size, 224);
  const absl::StatusOr<ViTConfig> tiny64 = ResolveViTConfig("vit-cifar-tiny", 3, 10, 64);
  ASSERT_TRUE(tiny64.ok()) << tiny64.status();
  EXPECT_EQ(tiny64->image_size, 64);
  EXPECT_EQ(tiny64->num_patches(), 256);
  // 192 more position embeddings of width 192.
  EXPECT_EQ(ViTParameterCount(*tiny64) -
                ViTParameterCount(*ResolveViTConfig("vit-cifar-tiny", 3, 10)),
            192 * 192);
  // 0 keeps the preset's size.
  EXPECT_EQ(ResolveViTConfig("vit-micro", 1, 10, 0)->image_size, 28);
}

TEST(ViTConfigTest, ImageSizeMustBeAMultipleOfThePatch) {
  const absl::StatusOr<ViTConfig> config = ResolveViTConfig("vit-b16", 3, 10, 100);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("multiple of patch"));
}

TEST(ViTConfigTest, UnknownPresetIsNotFoundAndListsTheKnownOnes) {
  const absl::StatusOr<ViTConfig> config = FindViTPreset("vit-h14");
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
