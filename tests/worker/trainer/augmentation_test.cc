#include "worker/trainer/data/augmentation.h"

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

// A 2-channel 3x4 image whose pixel (c, y, x) holds 100 * c + 10 * y + x + 1.
std::vector<uint8_t> Numbered() {
  std::vector<uint8_t> image;
  for (int c = 0; c < 2; ++c) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 4; ++x)
        image.push_back(static_cast<uint8_t>(100 * c + 10 * y + x + 1));
    }
  }
  return image;
}

std::vector<uint8_t> Apply(const ImageTransform& t) {
  const std::vector<uint8_t> in = Numbered();
  std::vector<uint8_t> out(in.size(), 255);
  ApplyImageTransform(t, 2, 3, 4, in.data(), out.data());
  return out;
}

TEST(ApplyImageTransformTest, IdentityCopiesTheImage) {
  EXPECT_EQ(Apply(ImageTransform{}), Numbered());
}

TEST(ApplyImageTransformTest, ShiftTakesTheCropWindowAndFillsPaddingWithZero) {
  // The window starts one row down and two columns left of the image.
  const std::vector<uint8_t> out = Apply(ImageTransform{.shift_y = 1, .shift_x = -2});
  const std::vector<uint8_t> expected = {
      0, 0, 11,  12,  0, 0, 21,  22,  0, 0, 0, 0,  // channel 0
      0, 0, 111, 112, 0, 0, 121, 122, 0, 0, 0, 0,  // channel 1
  };
  EXPECT_EQ(out, expected);
}

TEST(ApplyImageTransformTest, FlipMirrorsEachRow) {
  const std::vector<uint8_t> out = Apply(ImageTransform{.flip = true});
  const std::vector<uint8_t> expected = {
      4,   3,   2,   1,   14,  13,  12,  11,  24,  23,  22,  21,
      104, 103, 102, 101, 114, 113, 112, 111, 124, 123, 122, 121,
  };
  EXPECT_EQ(out, expected);
}

TEST(ApplyImageTransformTest, FlipAppliesToTheCroppedWindow) {
  // As torchvision's crop-then-flip: mirror of the shifted window.
  const std::vector<uint8_t> out = Apply(ImageTransform{.shift_x = 1, .flip = true});
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 4),
            (std::vector<uint8_t>{0, 4, 3, 2}));
}

TEST(DrawImageTransformTest, IsAPureFunctionOfSeedEpochAndIndex) {
  const AugmentationOptions options;
  for (int64_t index = 0; index < 50; ++index) {
    EXPECT_EQ(DrawImageTransform(options, 7, 3, index),
              DrawImageTransform(options, 7, 3, index));
  }
  int differ_by_epoch = 0;
  int differ_by_seed = 0;
  int differ_by_index = 0;
  for (int64_t index = 0; index < 200; ++index) {
    const ImageTransform t = DrawImageTransform(options, 7, 3, index);
    differ_by_epoch += !(t == DrawImageTransform(options, 7, 4, index));
    differ_by_seed += !(t == DrawImageTransform(options, 8, 3, index));
    differ_by_index += !(t == DrawImageTransform(options, 7, 3, index + 1));
  }
  // 162 equally likely draws: nearly all pairs differ.
  EXPECT_GT(differ_by_epoch, 180);
  EXPECT_GT(differ_by_seed, 180);
  EXPECT_GT(differ_by_index, 180);
}

TEST(DrawImageTransformTest, CoversEveryShiftAndFlipsAboutHalfTheImages) {
  AugmentationOptions options;
  options.crop_padding = 4;
  std::set<std::pair<int, int>> shifts;
  int flips = 0;
  constexpr int kDraws = 20000;
  for (int64_t index = 0; index < kDraws; ++index) {
    const ImageTransform t = DrawImageTransform(options, 1, 0, index);
    ASSERT_GE(t.shift_y, -4);
    ASSERT_LE(t.shift_y, 4);
    ASSERT_GE(t.shift_x, -4);
    ASSERT_LE(t.shift_x, 4);
    shifts.emplace(t.shift_y, t.shift_x);
    flips += t.flip;
  }
  EXPECT_EQ(shifts.size(), 81u);
  EXPECT_NEAR(static_cast<double>(flips) / kDraws, 0.5, 0.02);
}

TEST(DrawImageTransformTest, DisabledPartsStayIdentity) {
  AugmentationOptions options;
  options.crop_padding = 0;
  options.horizontal_flip = false;
  for (int64_t index = 0; index < 100; ++index) {
    EXPECT_EQ(DrawImageTransform(options, 5, 1, index), ImageTransform{});
  }
}

}  // namespace
}  // namespace tessera::trainer
