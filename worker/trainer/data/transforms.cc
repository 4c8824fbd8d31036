#include "worker/trainer/data/transforms.h"

#include <algorithm>
#include <cmath>

#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_decoder.h"

namespace tessera::trainer::data {
namespace {

// Python's round(): half to even (the default floating-point rounding mode).
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

CropBox Box(int x, int y, int w, int h) {
  return CropBox{static_cast<double>(x), static_cast<double>(y), static_cast<double>(w),
                 static_cast<double>(h)};
}

}  // namespace

CropBox DrawRandomResizedCrop(const RandomResizedCropOptions& options, int width,
                              int height, SampleRng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_min = std::log(options.ratio_min);
  const double log_max = std::log(options.ratio_max);
  for (int attempt = 0; attempt < options.attempts; ++attempt) {
    const double target = area * rng.Uniform(options.scale_min, options.scale_max);
    const double ratio = std::exp(rng.Uniform(log_min, log_max));
    const int w = RoundHalfEven(std::sqrt(target * ratio));
    const int h = RoundHalfEven(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto y = static_cast<int>(rng.UniformInt(0, height - h));
      const auto x = static_cast<int>(rng.UniformInt(0, width - w));
      return Box(x, y, w, h);
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_ratio < options.ratio_min) {
    h = RoundHalfEven(w / options.ratio_min);
  } else if (in_ratio > options.ratio_max) {
    w = RoundHalfEven(h * options.ratio_max);
  }
  return Box((width - w) / 2, (height - h) / 2, w, h);
}

CropBox EvalCenterCrop(int width, int height, int size, double crop_fraction) {
  const int short_side = static_cast<int>(std::floor(size / crop_fraction));
  int resized_w = short_side;
  int resized_h = short_side;
  if (width < height) {
    resized_h = static_cast<int>(static_cast<double>(short_side) * height / width);
  } else if (height < width) {
    resized_w = static_cast<int>(static_cast<double>(short_side) * width / height);
  }
  const int crop_w = std::min(size, resized_w);
  const int crop_h = std::min(size, resized_h);
  const int left = RoundHalfEven((resized_w - crop_w) / 2.0);
  const int top = RoundHalfEven((resized_h - crop_h) / 2.0);
  const double fx = static_cast<double>(width) / resized_w;
  const double fy = static_cast<double>(height) / resized_h;
  return CropBox{left * fx, top * fy, crop_w * fx, crop_h * fy};
}

SampleDraw DrawSampleTransform(const TransformOptions& options, int64_t epoch,
                               int64_t sample_id, int width, int height) {
  SampleDraw draw;
  if (!options.train) {
    draw.crop = EvalCenterCrop(width, height, options.size, options.crop_fraction);
    return draw;
  }
  SampleRng rng(options.seed, epoch, sample_id);
  draw.crop = DrawRandomResizedCrop(options.crop, width, height, rng);
  draw.flip = rng.Uniform(0.0, 1.0) < options.flip_probability;
  return draw;
}

void DecodeScratch::Trim() {
  if (region_.pixels.capacity() > kKeepBytes) PixelBuffer().swap(region_.pixels);
}

absl::Status DecodeTransformed(absl::string_view bytes, const TransformOptions& options,
                               int64_t epoch, int64_t sample_id, uint8_t* out,
                               DecodeScratch* scratch) {
  bool flip = false;
  RegionRequest request;
  request.out_width = options.size;
  request.out_height = options.size;
  request.margin = ResizeMargin(options.interpolation);
  request.choose_crop = [&](int width, int height) {
    const SampleDraw draw = DrawSampleTransform(options, epoch, sample_id, width, height);
    flip = draw.flip;
    return draw.crop;
  };
  DecodedRegion local;
  DecodedRegion& region = scratch != nullptr ? scratch->region() : local;
  const absl::Status status =
      DecodeImageRegionInto(bytes, request, DecodeLimits{}, region);
  if (status.ok()) {
    ResizeBoxToChw(region.pixels.data(), region.width, region.height, region.crop,
                   options.size, options.size, flip, out, options.interpolation);
  }
  if (scratch != nullptr) scratch->Trim();
  return status;
}

}  // namespace tessera::trainer::data
