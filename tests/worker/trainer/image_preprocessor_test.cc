#include "worker/trainer/data/image_preprocessor.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/data/augmentation.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {
namespace {

torch::Tensor RandomImages(int64_t batch, int64_t channels, int64_t height, int64_t width,
                           uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {batch, channels, height, width}, torch::kByte);
}

// The host pipeline as BatchLoader ran it before the conversion moved into
// ImagePreprocessor: the reference the device path must reproduce.
torch::Tensor PreviousHostPath(const torch::Tensor& raw, const ChannelStats& stats,
                               int size) {
  std::vector<float> inv_std;
  for (const float s : stats.stddev) inv_std.push_back(1.0f / s);
  const int64_t channels = raw.size(1);
  const torch::Tensor mean = torch::tensor(stats.mean).reshape({1, channels, 1, 1});
  const torch::Tensor inv = torch::tensor(inv_std).reshape({1, channels, 1, 1});
  torch::Tensor images = raw.to(torch::kFloat).div_(255.0f);
  images.sub_(mean).mul_(inv);
  if (raw.size(2) != size || raw.size(3) != size) {
    images = torch::nn::functional::interpolate(
        images, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{size, size})
                    .mode(torch::kBilinear)
                    .align_corners(false));
  }
  return images;
}

TEST(ApplyImageTransformsTest, BatchedGatherEqualsApplyImageTransformOnEachImage) {
  constexpr int64_t kBatch = 24, kChannels = 3, kHeight = 9, kWidth = 7;
  const torch::Tensor images = RandomImages(kBatch, kChannels, kHeight, kWidth, 11);
  std::vector<ImageTransform> transforms;
  for (int64_t i = 0; i < kBatch; ++i) {
    ImageTransform t;
    // Shifts inside the image, at its edges and past them (all padding).
    t.shift_y = static_cast<int>(i % 7) - 3 + (i == 5 ? 9 : 0);
    t.shift_x = static_cast<int>((i * 5) % 9) - 4 - (i == 6 ? 7 : 0);
    t.flip = i % 3 == 0;
    transforms.push_back(t);
  }
  const torch::Tensor out = ApplyImageTransforms(images, TransformsTensor(transforms));
  ASSERT_EQ(out.sizes(), images.sizes());
  const int64_t image_bytes = kChannels * kHeight * kWidth;
  const torch::Tensor contiguous = images.contiguous();
  for (int64_t i = 0; i < kBatch; ++i) {
    std::vector<uint8_t> expected(static_cast<size_t>(image_bytes));
    ApplyImageTransform(transforms[static_cast<size_t>(i)], kChannels, kHeight, kWidth,
                        contiguous.data_ptr<uint8_t>() + i * image_bytes,
                        expected.data());
    const torch::Tensor want =
        torch::from_blob(expected.data(), {kChannels, kHeight, kWidth}, torch::kByte);
    EXPECT_TRUE(torch::equal(out[i], want)) << "image " << i;
  }
  EXPECT_EQ(out[5].max().item<int>(), 0) << "shifted wholly outside: all padding";
}

TEST(ImagePreprocessorTest, EqualsThePreviousHostPathBitForBit) {
  const ChannelStats stats{{0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}};
  for (const auto& [data_size, model_size] :
       std::vector<std::pair<int, int>>{{32, 32}, {32, 224}, {28, 32}, {32, 24}}) {
    const torch::Tensor raw = RandomImages(8, 3, data_size, data_size, 5);
    const ImagePreprocessor preprocess(stats, model_size);
    const torch::Tensor got = preprocess(raw);
    EXPECT_EQ(got.sizes(), (std::vector<int64_t>{8, 3, model_size, model_size}));
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(got, PreviousHostPath(raw, stats, model_size)))
        << data_size << " -> " << model_size;
  }
}

TEST(ImagePreprocessorTest, TransformsAreAppliedBeforeTheConversion) {
  const ChannelStats stats{{0.5f}, {0.25f}};
  const torch::Tensor raw = RandomImages(4, 1, 8, 8, 2);
  const torch::Tensor transforms =
      TransformsTensor({{1, -2, true}, {0, 0, false}, {-3, 3, false}, {2, 0, true}});
  const ImagePreprocessor preprocess(stats, 16);
  EXPECT_TRUE(
      torch::equal(preprocess(raw, transforms),
                   PreviousHostPath(ApplyImageTransforms(raw, transforms), stats, 16)));
  EXPECT_FALSE(torch::equal(preprocess(raw, transforms), preprocess(raw)));
}

TEST(ImagePreprocessorTest, RejectsImagesWithAnotherChannelCount) {
  const ImagePreprocessor preprocess(ChannelStats{{0.5f}, {0.25f}}, 8);
  EXPECT_THROW(preprocess(RandomImages(2, 3, 8, 8, 1)), c10::Error);
}

}  // namespace
}  // namespace tessera::trainer
