#include "worker/trainer/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer::data {
namespace {

TEST(RandomResizedCropTest, DrawsStayInsideWithAreaAndRatioInBounds) {
  const RandomResizedCropOptions o;
  for (const auto& [w, h] :
       std::vector<std::pair<int, int>>{{500, 375}, {375, 500}, {64, 64}}) {
    for (int64_t id = 0; id < 2000; ++id) {
      SampleRng rng(7, 3, id);
      const CropBox c = DrawRandomResizedCrop(o, w, h, rng);
      ASSERT_EQ(c.x, std::floor(c.x));
      ASSERT_GE(c.x, 0);
      ASSERT_GE(c.y, 0);
      ASSERT_GT(c.width, 0);
      ASSERT_GT(c.height, 0);
      ASSERT_LE(c.x + c.width, w);
      ASSERT_LE(c.y + c.height, h);
      // Sizes are rounded from the drawn area and ratio: allow half a pixel.
      const double area = static_cast<double>(w) * h;
      EXPECT_GE((c.width + 0.5) * (c.height + 0.5), o.scale_min * area) << id;
      EXPECT_LE((c.width - 0.5) * (c.height - 0.5), o.scale_max * area) << id;
      EXPECT_LE((c.width - 0.5) / (c.height + 0.5), o.ratio_max) << id;
      EXPECT_GE((c.width + 0.5) / (c.height - 0.5), o.ratio_min) << id;
    }
  }
}

TEST(RandomResizedCropTest, FallsBackToTheCentreCropClampedToTheRatio) {
  // No crop of 8%+ of a 1000x10 image has a ratio within [3/4, 4/3].
  SampleRng rng(1, 0, 5);
  const CropBox c = DrawRandomResizedCrop({}, 1000, 10, rng);
  EXPECT_EQ(c.height, 10);
  EXPECT_EQ(c.width, 13);  // round(10 * 4/3)
  EXPECT_EQ(c.x, (1000 - 13) / 2);
  EXPECT_EQ(c.y, 0);
  SampleRng tall(1, 0, 5);
  const CropBox t = DrawRandomResizedCrop({}, 10, 1000, tall);
  EXPECT_EQ(t.width, 10);
  EXPECT_EQ(t.height, 13);  // round(10 / (3/4))
  EXPECT_EQ(t.y, (1000 - 13) / 2);
}

TEST(RandomResizedCropTest, DrawIsAPureFunctionOfSeedEpochAndSample) {
  TransformOptions o;
  o.seed = 42;
  int differ_by_epoch = 0;
  int differ_by_seed = 0;
  int flips = 0;
  for (int64_t id = 0; id < 200; ++id) {
    const SampleDraw a = DrawSampleTransform(o, 5, id, 500, 375);
    const SampleDraw b = DrawSampleTransform(o, 5, id, 500, 375);
    EXPECT_EQ(a.crop.x, b.crop.x);
    EXPECT_EQ(a.crop.y, b.crop.y);
    EXPECT_EQ(a.crop.width, b.crop.width);
    EXPECT_EQ(a.flip, b.flip);
    differ_by_epoch += DrawSampleTransform(o, 6, id, 500, 375).crop.x != a.crop.x;
    TransformOptions other = o;
    other.seed = 43;
    differ_by_seed += DrawSampleTransform(other, 5, id, 500, 375).crop.x != a.crop.x;
    flips += a.flip;
  }
  EXPECT_GT(differ_by_epoch, 150);
  EXPECT_GT(differ_by_seed, 150);
  EXPECT_GT(flips, 70);  // p = 0.5 over 200 draws
  EXPECT_LT(flips, 130);
}

TEST(EvalCenterCropTest, ResizesShorterSideThenCropsTheCentre) {
  // 500x375 -> 341x256 (crop fraction 0.875: 224 / 0.875 = 256), then the
  // centre 224x224 at (round(58.5) = 58, 16), mapped back to the source.
  const CropBox c = EvalCenterCrop(500, 375, 224, 0.875);
  EXPECT_NEAR(c.x, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(c.y, 16 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(c.width, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(c.height, 224 * 375.0 / 256, 1e-9);
  const CropBox square = EvalCenterCrop(256, 256, 224, 0.875);
  EXPECT_NEAR(square.x, 16, 1e-9);
  EXPECT_NEAR(square.width, 224, 1e-9);
  TransformOptions eval;
  eval.train = false;
  EXPECT_FALSE(DrawSampleTransform(eval, 0, 0, 500, 375).flip);
}

TEST(CropResizeTest, SameSizeBoxIsACopyInChwAndFlipMirrors) {
  const int w = 9;
  const int h = 5;
  const std::vector<uint8_t> hwc = testing::Pattern(w, h, 3, 1);
  std::vector<uint8_t> chw(3 * w * h);
  std::vector<uint8_t> flipped(3 * w * h);
  ResizeBoxToChw(hwc.data(), w, h, {0, 0, double(w), double(h)}, w, h, false, chw.data());
  ResizeBoxToChw(hwc.data(), w, h, {0, 0, double(w), double(h)}, w, h, true,
                 flipped.data());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        EXPECT_EQ(chw[(c * h + y) * w + x], hwc[(y * w + x) * 3 + c]);
        EXPECT_EQ(flipped[(c * h + y) * w + (w - 1 - x)], hwc[(y * w + x) * 3 + c]);
      }
    }
  }
}

TEST(CropResizeTest, HalvingAveragesNeighbours) {
  // Two columns 0 and 200: the half-size sample sits between them.
  const std::vector<uint8_t> hwc = {0, 0, 0, 200, 200, 200};
  uint8_t out[3];
  ResizeBoxToChw(hwc.data(), 2, 1, {0, 0, 2, 1}, 1, 1, false, out);
  EXPECT_EQ(out[0], 100);
}

// One output pixel of ResizeBoxToChw's contract, computed on its own: taps at
// pixel centres mapped into the box and clamped to the image, weights rounded
// to 1/256ths, rows blended first and columns second, rounded once.
struct ReferenceTap {
  int first;
  int second;
  int weight;
};
ReferenceTap ReferenceTapAt(double start, double length, int out, int limit, int i) {
  const double pos = std::clamp(start + (i + 0.5) * (length / out) - 0.5, 0.0,
                                static_cast<double>(limit - 1));
  const int first = static_cast<int>(pos);
  return {first, std::min(first + 1, limit - 1),
          static_cast<int>(std::lround((pos - first) * 256))};
}

uint8_t ReferencePixel(const std::vector<uint8_t>& hwc, int w, int h, const CropBox& box,
                       int ow, int oh, int ox, int oy, int c) {
  const ReferenceTap tx = ReferenceTapAt(box.x, box.width, ow, w, ox);
  const ReferenceTap ty = ReferenceTapAt(box.y, box.height, oh, h, oy);
  auto column = [&](int x) {
    return hwc[(ty.first * w + x) * 3 + c] * (256 - ty.weight) +
           hwc[(ty.second * w + x) * 3 + c] * ty.weight;
  };
  const int p = column(tx.first);
  const int q = column(tx.second);
  return static_cast<uint8_t>((p * 256 + (q - p) * tx.weight + 32768) >> 16);
}

TEST(CropResizeTest, EveryPixelMatchesThePerPixelDefinitionBitForBit) {
  // Random images, boxes (fractional, at the edges, larger and smaller than
  // the output), output widths that are and are not multiples of the
  // vectorised pass's 8 pixels, and both mirrors.
  SampleRng rng(7, 0, 0);
  for (int trial = 0; trial < 300; ++trial) {
    const int w = static_cast<int>(rng.UniformInt(1, 90));
    const int h = static_cast<int>(rng.UniformInt(1, 60));
    std::vector<uint8_t> hwc(static_cast<size_t>(w) * h * 3);
    for (uint8_t& v : hwc) v = static_cast<uint8_t>(rng.UniformInt(0, 255));
    const double x0 = rng.Uniform(0, w - 0.5);
    const double y0 = rng.Uniform(0, h - 0.5);
    const CropBox box{x0, y0, rng.Uniform(0.5, w - x0), rng.Uniform(0.5, h - y0)};
    const int ow = static_cast<int>(rng.UniformInt(1, 70));
    const int oh = static_cast<int>(rng.UniformInt(1, 20));
    const bool flip = trial % 2 == 1;
    std::vector<uint8_t> out(static_cast<size_t>(3) * ow * oh);
    ResizeBoxToChw(hwc.data(), w, h, box, ow, oh, flip, out.data());
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < oh; ++y) {
        for (int x = 0; x < ow; ++x) {
          const int source_x = flip ? ow - 1 - x : x;
          ASSERT_EQ(out[(static_cast<size_t>(c) * oh + y) * ow + x],
                    ReferencePixel(hwc, w, h, box, ow, oh, source_x, y, c))
              << "trial " << trial << " " << w << "x" << h << " -> " << ow << "x" << oh
              << " at channel " << c << " (" << x << ", " << y << ")";
        }
      }
    }
  }
}

TEST(DecodeTransformedTest, FlipMirrorsTheSameCrop) {
  const std::string jpeg = testing::MakeJpeg(120, 90, 2);
  TransformOptions o;
  o.size = 32;
  o.seed = 9;
  o.flip_probability = 0;
  std::vector<uint8_t> plain(3 * 32 * 32);
  std::vector<uint8_t> mirrored(3 * 32 * 32);
  ASSERT_TRUE(DecodeTransformed(jpeg, o, 1, 17, plain.data()).ok());
  o.flip_probability = 1;
  ASSERT_TRUE(DecodeTransformed(jpeg, o, 1, 17, mirrored.data()).ok());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        ASSERT_EQ(plain[(c * 32 + y) * 32 + x], mirrored[(c * 32 + y) * 32 + 31 - x]);
      }
    }
  }
  EXPECT_TRUE(absl::IsDataLoss(DecodeTransformed("", o, 1, 17, plain.data())));
}

TEST(DecodeTransformedTest, AScratchReusesOneBufferAndReleasesAnOversizedOne) {
  // Eval transform: every decode of an image crops the same region.
  TransformOptions o;
  o.train = false;
  o.size = 32;
  const std::string jpeg = testing::MakeJpeg(160, 120, 3);
  std::vector<uint8_t> expected(3 * 32 * 32);
  ASSERT_TRUE(DecodeTransformed(jpeg, o, 0, 0, expected.data()).ok());
  DecodeScratch scratch;
  const uint8_t* first_buffer = nullptr;
  for (int i = 0; i < 4; ++i) {
    std::vector<uint8_t> out(3 * 32 * 32);
    ASSERT_TRUE(DecodeTransformed(jpeg, o, 0, 0, out.data(), &scratch).ok());
    EXPECT_EQ(out, expected) << "decode " << i;
    if (i == 0) first_buffer = scratch.region().pixels.data();
    EXPECT_EQ(scratch.region().pixels.data(), first_buffer) << "decode " << i;
  }
  EXPECT_GT(scratch.capacity(), 0u);
  EXPECT_LE(scratch.capacity(), DecodeScratch::kKeepBytes);

  // A PNG (no DCT scaling) whose eval crop, 1750 x 1750 x 3 bytes, is over the
  // bound: decoded correctly, then released.
  const std::string big = testing::MakePng(2000, 2000, 4);
  std::vector<uint8_t> big_expected(3 * 32 * 32);
  std::vector<uint8_t> big_out(3 * 32 * 32);
  ASSERT_TRUE(DecodeTransformed(big, o, 0, 1, big_expected.data()).ok());
  ASSERT_TRUE(DecodeTransformed(big, o, 0, 1, big_out.data(), &scratch).ok());
  EXPECT_EQ(big_out, big_expected);
  EXPECT_EQ(scratch.capacity(), 0u);
  // A failed decode leaves the scratch usable.
  EXPECT_TRUE(absl::IsDataLoss(DecodeTransformed("", o, 0, 2, big_out.data(), &scratch)));
  std::vector<uint8_t> again(3 * 32 * 32);
  ASSERT_TRUE(DecodeTransformed(jpeg, o, 0, 0, again.data(), &scratch).ok());
  EXPECT_EQ(again, expected);
}

TEST(SampleRngTest, UniformIntCoversTheRangeAndShuffleIsAPermutation) {
  SampleRng rng(1, 2, 3);
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 500; ++i) ++seen[rng.UniformInt(0, 4)];
  for (int count : seen) EXPECT_GT(count, 50);
  SampleRng shuffle(1, 2, kSamplePermutationStream);
  std::vector<int64_t> order = SeededShuffle(100, shuffle);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
}

}  // namespace
}  // namespace tessera::trainer::data
