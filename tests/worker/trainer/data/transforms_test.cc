#include "worker/trainer/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
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

// torchvision's values for the bicubic tests, computed by Debian's
// /usr/bin/python3 (torch 1.13, torchvision 0.14) from the 9x7 image of
// BicubicSource():
//   img = torch.tensor([[[(x * 37 + y * 91 + c * 53 + x * y * 7) % 256
//                         for x in range(9)] for y in range(7)] for c in range(3)],
//                      dtype=torch.uint8)
//   F.resize(img, [4, 5], interpolation=InterpolationMode.BICUBIC)    # kTorchDown
//   F.resize(img, [11, 13], interpolation=InterpolationMode.BICUBIC)  # kTorchUp
//   F.resize(img, [14, 18], interpolation=InterpolationMode.BICUBIC)[:, 3:9, 2:10]
//                                                                     # kTorchCrop
// (F is torchvision.transforms.functional; CHW, no antialiasing: the tensor
// Resize's default in 0.14.)
constexpr uint8_t kTorchDown[] = {
    38,  136, 91,  173, 77,  205, 16,  152, 237, 53,  117, 211, 119, 243, 92,
    81,  137, 151, 188, 101, 99,  165, 144, 91,  141, 144, 100, 176, 66,  105,
    189, 37,  161, 71,  144, 133, 209, 95,  109, 165, 170, 118, 197, 115, 127,
    45,  164, 229, 72,  156, 141, 111, 214, 76,  192, 139, 87,  148, 143, 67,
};
constexpr uint8_t kTorchUp[] = {
    0,   8,   38,  61,  83,  120, 161, 185, 231, 220, 38,  0,   30,  30,  49,  88,  128,
    174, 148, 76,  95,  140, 152, 89,  86,  118, 100, 126, 157, 170, 226, 161, 11,  29,
    77,  107, 130, 166, 190, 177, 224, 198, 67,  80,  102, 82,  130, 196, 199, 76,  53,
    99,  124, 172, 157, 47,  67,  145, 193, 155, 165, 190, 92,  82,  128, 12,  43,  91,
    127, 167, 224, 249, 104, 47,  115, 151, 199, 230, 48,  97,  176, 227, 140, 96,  154,
    140, 169, 197, 102, 114, 183, 148, 137, 158, 210, 115, 68,  133, 143, 190, 215, 110,
    61,  70,  217, 97,  16,  85,  131, 194, 229, 97,  53,  130, 194, 111, 0,   121, 75,
    67,  129, 102, 109, 166, 118, 130, 183, 156, 107, 74,  10,  67,  155, 207, 73,  0,
    81,  150, 239, 255, 98,  91,  176, 42,  61,  90,  112, 153, 192, 214, 255, 161, 0,
    25,  63,  83,  81,  115, 165, 189, 124, 89,  129, 168, 141, 87,  114, 151, 171, 155,
    166, 199, 234, 94,  8,   66,  96,  127, 154, 182, 220, 245, 248, 136, 56,  109, 91,
    103, 162, 219, 154, 46,  77,  139, 182, 194, 98,  38,  101, 172, 184, 141, 191, 150,
    67,  114, 105, 68,  65,  96,  144, 180, 248, 191, 46,  71,  128, 169, 230, 135, 6,
    100, 180, 197, 88,  114, 144, 130, 187, 152, 74,  123, 137, 122, 201, 212, 158, 46,
    77,  129, 139, 203, 156, 61,  111, 147, 153, 255, 152, 64,  117, 202, 166, 32,  67,
    130, 177, 245, 165, 46,  174, 126, 125, 204, 179, 114, 82,  138, 146, 118, 181, 172,
    127, 63,  120, 208, 255, 123, 58,  158, 242, 167, 32,  84,  172, 229, 95,  111, 149,
    188, 217, 255, 255, 91,  8,   64,  84,  127, 161, 158, 192, 183, 108, 117, 163, 182,
    123, 106, 147, 185, 141, 77,  186, 235, 195, 38,  38,  90,  119, 144, 176, 209, 255,
    159, 25,  63,  96,  113, 88,  131, 197, 215, 98,  50,  111, 169, 176, 152, 34,  69,
    135, 189, 159, 156, 194, 101, 78,  122, 75,  103, 160, 118, 149, 205, 245, 112, 33,
    99,  137, 198, 205, 54,  24,  80,  217, 128, 73,  132, 124, 143, 183, 96,  78,  130,
    112, 141, 181, 191, 88,  26,  98,  115, 153, 192, 86,  58,  121, 127, 175, 221, 52,
    76,  136, 197, 78,  11,  85,  127, 196, 213, 73,  64,  135, 77,  145, 182, 126, 68,
    76,  135, 100, 120, 169, 130, 73,  38,  142, 212, 192, 36,  71,  175, 211, 64,  12,
    102, 195, 113, 0,
};
constexpr uint8_t kTorchCrop[] = {
    165, 172, 154, 167, 206, 161, 56,  11,  238, 194, 91,  48,  88,  102, 83,  99,
    210, 169, 66,  25,  66,  119, 160, 178, 92,  104, 89,  108, 150, 205, 247, 207,
    61,  113, 157, 179, 165, 185, 229, 195, 134, 193, 238, 202, 104, 68,  112, 144,
    159, 174, 213, 168, 63,  18,  58,  97,  94,  52,  92,  106, 88,  103, 143, 191,
    64,  25,  66,  119, 160, 178, 161, 177, 84,  105, 147, 202, 244, 204, 103, 63,
    145, 173, 158, 178, 222, 188, 94,  60,  219, 195, 95,  58,  102, 134, 138, 170,
    221, 174, 70,  25,  65,  104, 125, 139, 103, 110, 92,  107, 147, 195, 228, 184,
    72,  119, 160, 178, 161, 177, 218, 180, 144, 199, 241, 201, 100, 60,  101, 129,
    147, 170, 215, 181, 87,  53,  95,  125, 82,  48,  92,  124, 128, 160, 203, 170,
};

std::vector<uint8_t> BicubicSource() {
  std::vector<uint8_t> hwc(9 * 7 * 3);
  for (int y = 0; y < 7; ++y) {
    for (int x = 0; x < 9; ++x) {
      for (int c = 0; c < 3; ++c) {
        hwc[(y * 9 + x) * 3 + c] =
            static_cast<uint8_t>((x * 37 + y * 91 + c * 53 + x * y * 7) % 256);
      }
    }
  }
  return hwc;
}

std::vector<uint8_t> Bicubic(const CropBox& box, int ow, int oh, bool flip = false) {
  const std::vector<uint8_t> hwc = BicubicSource();
  std::vector<uint8_t> out(static_cast<size_t>(3) * ow * oh);
  ResizeBoxToChw(hwc.data(), 9, 7, box, ow, oh, flip, out.data(),
                 Interpolation::kBicubic);
  return out;
}

TEST(CropResizeTest, BicubicDownAndUpIsTorchvisionsResizeExactly) {
  EXPECT_EQ(Bicubic({0, 0, 9, 7}, 5, 4),
            std::vector<uint8_t>(std::begin(kTorchDown), std::end(kTorchDown)));
  EXPECT_EQ(Bicubic({0, 0, 9, 7}, 13, 11),
            std::vector<uint8_t>(std::begin(kTorchUp), std::end(kTorchUp)));
}

TEST(CropResizeTest, BicubicBoxIsTheCropOfTheWholeImagesResize) {
  // The 8x6 crop at (2, 3) of the 18x14 resize is the box (1, 1.5, 4, 3) of the
  // source: its taps read the pixels around the box, as the whole resize does.
  EXPECT_EQ(Bicubic({1, 1.5, 4, 3}, 8, 6),
            std::vector<uint8_t>(std::begin(kTorchCrop), std::end(kTorchCrop)));
  const std::vector<uint8_t> mirrored = Bicubic({1, 1.5, 4, 3}, 8, 6, true);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 6; ++y) {
      for (int x = 0; x < 8; ++x) {
        EXPECT_EQ(mirrored[(c * 6 + y) * 8 + x], kTorchCrop[(c * 6 + y) * 8 + 7 - x]);
      }
    }
  }
}

TEST(CropResizeTest, BicubicSameSizeBoxIsACopy) {
  const std::vector<uint8_t> hwc = BicubicSource();
  const std::vector<uint8_t> out = Bicubic({0, 0, 9, 7}, 9, 7);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 9 * 7; ++i) EXPECT_EQ(out[c * 63 + i], hwc[i * 3 + c]);
  }
}

TEST(CropResizeTest, ParsesTheInterpolationNames) {
  EXPECT_EQ(*ParseInterpolation("bilinear"), Interpolation::kBilinear);
  EXPECT_EQ(*ParseInterpolation("bicubic"), Interpolation::kBicubic);
  EXPECT_FALSE(ParseInterpolation("lanczos").ok());
  EXPECT_EQ(ResizeMargin(Interpolation::kBilinear), 1);
  EXPECT_EQ(ResizeMargin(Interpolation::kBicubic), 2);
}

TEST(DecodeTransformedTest, BicubicRegionDecodeMatchesTheResizeOfTheWholeImage) {
  // The evaluation crop of a PNG (exact pixels) decoded as a region must read
  // the two pixels beyond the crop that bicubic taps need.
  const int w = 61;
  const int h = 47;
  const std::string png = testing::MakePng(w, h, 4);
  TransformOptions o;
  o.train = false;
  o.size = 24;
  o.crop_fraction = 0.6;
  o.interpolation = Interpolation::kBicubic;
  std::vector<uint8_t> decoded(3 * 24 * 24);
  ASSERT_TRUE(DecodeTransformed(png, o, 0, 0, decoded.data()).ok());
  const std::vector<uint8_t> hwc = testing::Pattern(w, h, 3, 4);
  std::vector<uint8_t> whole(3 * 24 * 24);
  ResizeBoxToChw(hwc.data(), w, h, EvalCenterCrop(w, h, 24, 0.6), 24, 24, false,
                 whole.data(), Interpolation::kBicubic);
  EXPECT_EQ(decoded, whole);
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
