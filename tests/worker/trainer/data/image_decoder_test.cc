#include "worker/trainer/data/image_decoder.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_encoder.h"
#include "worker/trainer/data/image_format.h"
#include "worker/trainer/data/jpeg_decoder.h"

namespace tessera::trainer::data {
namespace {

using testing::MakeJpeg;
using testing::MakePng;
using testing::Pattern;

RegionRequest Request(CropBox crop, int out) {
  RegionRequest r;
  r.choose_crop = [crop](int, int) { return crop; };
  r.out_width = out;
  r.out_height = out;
  return r;
}

// Mean and max absolute difference between region pixels and the same pixels
// of the full image, the region placed by its crop offset.
struct Diff {
  double mean = 0;
  int max = 0;
};
Diff CompareToFull(const DecodedRegion& region, const DecodedRegion& full) {
  const int dx = static_cast<int>(std::lround(region.source_crop.x - region.crop.x));
  const int dy = static_cast<int>(std::lround(region.source_crop.y - region.crop.y));
  Diff d;
  // jpeg_crop_scanline's edge columns are upsampled from replicated
  // neighbours; the decoder keeps them outside what a crop reads.
  const int first = dx > 0 ? 1 : 0;
  const int end = dx + region.width < full.width ? region.width - 1 : region.width;
  for (int y = 0; y < region.height; ++y) {
    for (int x = first; x < end; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int a = region.pixels[(y * region.width + x) * 3 + c];
        const int b = full.pixels[((y + dy) * full.width + x + dx) * 3 + c];
        d.mean += std::abs(a - b);
        d.max = std::max(d.max, std::abs(a - b));
      }
    }
  }
  d.mean /= 3.0 * (end - first) * region.height;
  return d;
}

std::vector<uint8_t> Resized(const DecodedRegion& r, int size) {
  std::vector<uint8_t> out(3 * size * size);
  ResizeBoxToChw(r.pixels.data(), r.width, r.height, r.crop, size, size, false,
                 out.data());
  return out;
}

// The full decode's pixels of `region`'s source crop, resized.
std::vector<uint8_t> FullResized(const DecodedRegion& full, const DecodedRegion& region,
                                 int size) {
  DecodedRegion cropped = full;
  cropped.crop = region.source_crop;
  return Resized(cropped, size);
}

double MeanAbs(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / a.size();
}

TEST(ImageDecoderTest, JpegRegionDecodeEqualsFullDecodeCrop) {
  const std::string jpeg = MakeJpeg(203, 150, 3);
  auto full = DecodeImage(jpeg);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->width, 203);
  EXPECT_EQ(full->height, 150);
  // The output is larger than half the crop: no DCT scaling, rows and columns cut.
  auto region = DecodeImageRegion(jpeg, Request({61, 37, 80, 70}, 64));
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->scale_denom, 1);
  EXPECT_LT(region->width, 203);
  EXPECT_LT(region->height, 150);
  EXPECT_GE(region->crop.x, 0);
  EXPECT_LE(region->crop.x + region->crop.width, region->width);
  EXPECT_LE(region->crop.y + region->crop.height, region->height);
  const Diff d = CompareToFull(*region, *full);
  EXPECT_LT(d.mean, 0.5);
  EXPECT_LE(d.max, 2);
  EXPECT_LT(MeanAbs(Resized(*region, 64), FullResized(*full, *region, 64)), 0.5);
}

TEST(ImageDecoderTest, LargeCropUsesDctScalingAndStaysClose) {
  const std::string jpeg = MakeJpeg(480, 360, 5);
  auto full = DecodeImage(jpeg);
  ASSERT_TRUE(full.ok()) << full.status();
  // A 400x300 crop to 96 px: 1/4 keeps it at 100x75 >= 96? No: 75 < 96, so 1/2.
  auto region = DecodeImageRegion(jpeg, Request({40, 30, 400, 300}, 96));
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->scale_denom, 2);
  EXPECT_LE(region->width, 240);
  EXPECT_LE(region->height, 180);
  EXPECT_NEAR(region->crop.width, 200, 1);
  EXPECT_NEAR(region->crop.height, 150, 1);
  // Against the full decode's crop resized (the scaled decode is a box filter,
  // the full path plain bilinear: close, not equal).
  EXPECT_LT(MeanAbs(Resized(*region, 96), FullResized(*full, *region, 96)), 4.0);
  auto small = DecodeImageRegion(jpeg, Request({0, 0, 480, 360}, 40));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->scale_denom, 8);
  EXPECT_EQ(small->width, 60);
  EXPECT_EQ(small->height, 45);
}

TEST(ImageDecoderTest, ChoosesLargestScaleKeepingTheOutputCovered) {
  EXPECT_EQ(ChooseDctScaleDenom({0, 0, 448, 448}, 224, 224), 2);
  EXPECT_EQ(ChooseDctScaleDenom({0, 0, 447, 448}, 224, 224), 1);
  EXPECT_EQ(ChooseDctScaleDenom({0, 0, 900, 1000}, 224, 224), 4);
  EXPECT_EQ(ChooseDctScaleDenom({0, 0, 1792, 1792}, 224, 224), 8);
  EXPECT_EQ(ChooseDctScaleDenom({0, 0, 5000, 5000}, 0, 0), 1);
}

TEST(ImageDecoderTest, GrayscaleJpegBecomesRgb) {
  const std::string jpeg = MakeJpeg(64, 48, 2, /*channels=*/1);
  auto image = DecodeImage(jpeg);
  ASSERT_TRUE(image.ok()) << image.status();
  const std::vector<uint8_t> gray = Pattern(64, 48, 1, 2);
  double err = 0;
  for (int i = 0; i < 64 * 48; ++i) {
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 1]);
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 2]);
    err += std::abs(int{image->pixels[3 * i]} - int{gray[i]});
  }
  EXPECT_LT(err / (64 * 48), 3.0);
}

TEST(ImageDecoderTest, AdobeCmykJpegBecomesRgb) {
  // Adobe CMYK stores 255 - ink: with K stored as 255 (no black ink), the RGB
  // colour is the stored C, M, Y.
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < 32 * 16; ++i) cmyk.insert(cmyk.end(), {200, 100, 50, 255});
  auto jpeg = EncodeJpeg(cmyk.data(), 32, 16, 4, 95);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  auto image = DecodeImage(*jpeg);
  ASSERT_TRUE(image.ok()) << image.status();
  for (int i = 0; i < 32 * 16; ++i) {
    EXPECT_NEAR(image->pixels[3 * i], 200, 3);
    EXPECT_NEAR(image->pixels[3 * i + 1], 100, 3);
    EXPECT_NEAR(image->pixels[3 * i + 2], 50, 3);
  }
}

TEST(ImageDecoderTest, PngRegionIsExactlyTheSourcePixels) {
  const std::vector<uint8_t> rgb = Pattern(90, 70, 3, 4);
  auto region = DecodeImageRegion(MakePng(90, 70, 4), Request({20, 10, 50, 40}, 32));
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->width, 52);  // 50 plus a pixel on each side
  EXPECT_EQ(region->height, 42);
  for (int y = 0; y < region->height; ++y) {
    for (int x = 0; x < region->width * 3; ++x) {
      ASSERT_EQ(region->pixels[y * region->width * 3 + x],
                rgb[(y + 9) * 90 * 3 + 19 * 3 + x]);
    }
  }
  auto gray = DecodeImage(MakePng(30, 20, 4, /*channels=*/1));
  ASSERT_TRUE(gray.ok()) << gray.status();
  EXPECT_EQ(gray->pixels.size(), 30u * 20 * 3);
}

TEST(ImageDecoderTest, FormatComesFromTheBytes) {
  EXPECT_EQ(SniffImageFormat(MakePng(8, 8, 1)), ImageFormat::kPng);
  EXPECT_EQ(SniffImageFormat(MakeJpeg(8, 8, 1)), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat("GIF89a"), ImageFormat::kUnknown);
  EXPECT_TRUE(IsImageFileName("a/B.JPG"));
  EXPECT_TRUE(IsImageFileName("x.JpEg"));
  EXPECT_TRUE(IsImageFileName("x.png"));
  EXPECT_FALSE(IsImageFileName("x.gif"));
  EXPECT_FALSE(IsImageFileName(".jpg"));
}

TEST(ImageDecoderTest, ZeroByteTruncatedAndCorruptInputAreDataLoss) {
  const std::string jpeg = MakeJpeg(120, 90, 6);
  const std::string png = MakePng(120, 90, 6);
  auto empty = DecodeImage("");
  EXPECT_TRUE(absl::IsDataLoss(empty.status())) << empty.status();
  EXPECT_NE(empty.status().message().find("0 bytes"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsDataLoss(DecodeImage("hello, not an image").status()));
  for (const std::string& bytes : {jpeg, png}) {
    for (const size_t keep :
         {size_t{3}, size_t{40}, bytes.size() / 2, bytes.size() - 20}) {
      const absl::Status s = DecodeImage(bytes.substr(0, keep)).status();
      EXPECT_TRUE(absl::IsDataLoss(s)) << keep << " of " << bytes.size() << ": " << s;
    }
  }
  std::string bad_png = png;
  bad_png[bad_png.size() / 2] ^= 0x55;  // the IDAT checksum no longer matches
  EXPECT_TRUE(absl::IsDataLoss(DecodeImage(bad_png).status()))
      << DecodeImage(bad_png).status();
  std::string bad_jpeg = jpeg.substr(0, 2) + std::string(300, '\x01');
  EXPECT_TRUE(absl::IsDataLoss(DecodeImage(bad_jpeg).status()));
}

TEST(ImageDecoderTest, ImagesOverTheLimitsAreInvalidArgument) {
  DecodeLimits limits;
  limits.max_pixels = 100;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeImage(MakeJpeg(20, 20, 1), limits).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeImage(MakePng(20, 20, 1), limits).status()));
}

}  // namespace
}  // namespace tessera::trainer::data
