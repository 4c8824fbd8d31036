// The request and result types of the region decoders (jpeg_decoder.h,
// png_decoder.h, image_decoder.h): which part of an image to decode, for which
// output size, and the decoded pixels with the crop's position in them.
//
// A decoder reads the image header, asks RegionRequest::choose_crop for the crop
// (the crop usually depends on the image size: a RandomResizedCrop draw), then
// decodes only the pixels that crop needs, possibly DCT-scaled down (JPEG), and
// reports in DecodedRegion::crop where the crop lies in the decoded pixels, so a
// resize of that box (crop_resize.h) gives the same picture as a resize of the
// crop of a full decode. Plain values: no shared state.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_REGION_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_REGION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace tessera::trainer::data {

// A rectangle in pixel units of some image; fractional where it results from
// scaling (evaluation crops, DCT-scaled decodes).
struct CropBox {
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
};

struct RegionRequest {
  // Called once with the encoded image's size; returns the crop in source
  // pixels, inside [0, width] x [0, height] and non-empty. Unset: the whole image.
  std::function<CropBox(int width, int height)> choose_crop;
  // The size the crop will be resized to. When the crop is at least twice as
  // large on both axes, a JPEG decodes DCT-scaled by 1/2, 1/4 or 1/8 (the
  // largest that keeps the scaled crop at least this size). 0: no scaling.
  int out_width = 0;
  int out_height = 0;
  // Pixels beyond each side of the crop that the resize reads (crop_resize.h's
  // ResizeMargin: 1 bilinear, 2 bicubic), decoded with it where the image has them.
  int margin = 1;
};

// Limits on what a decoder accepts; images beyond them are InvalidArgument
// before any pixel memory is allocated.
struct DecodeLimits {
  int64_t max_pixels = int64_t{100} * 1000 * 1000;  // width * height of the source
  int max_side = 1 << 16;
};

// An allocator that leaves bytes uninitialised where std::allocator would zero
// them: a decoder overwrites every byte of its output, and zeroing half a
// megabyte per image first cost 4% of the pipeline's instructions
// (bench/input_pipeline under callgrind).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>& /*other*/) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no zeroing
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Decoded pixels: resize() leaves new bytes unset.
using PixelBuffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

struct DecodedRegion {
  int source_width = 0;  // the encoded image's size
  int source_height = 0;
  CropBox source_crop;  // the crop chosen, in source pixels
  int scale_denom = 1;  // JPEG DCT scaling used: 1, 2, 4 or 8
  int width = 0;        // of `pixels`
  int height = 0;
  PixelBuffer pixels;  // RGB, height x width x 3 (HWC)
  CropBox crop;        // source_crop in `pixels` coordinates
};

// The crop a decoder uses for `request` on a width x height image: the chosen
// one clipped to the image, or the whole image when none is chosen or the
// chosen one is empty after clipping.
inline CropBox ResolveCrop(const RegionRequest& request, int width, int height) {
  const CropBox whole{0, 0, static_cast<double>(width), static_cast<double>(height)};
  if (!request.choose_crop) return whole;
  CropBox c = request.choose_crop(width, height);
  const double x0 = std::clamp(c.x, 0.0, whole.width);
  const double y0 = std::clamp(c.y, 0.0, whole.height);
  const double x1 = std::clamp(c.x + c.width, x0, whole.width);
  const double y1 = std::clamp(c.y + c.height, y0, whole.height);
  if (!(x1 > x0) || !(y1 > y0)) return whole;
  return CropBox{x0, y0, x1 - x0, y1 - y0};
}

// Pixels [begin, end) of an axis of `limit` pixels that a resize of the span
// [start, start + length) (already in that axis' pixel units) reads: the
// covered pixels plus `margin` on each side (1 bilinear, 2 bicubic), clipped
// to the axis.
struct PixelSpan {
  int begin = 0;
  int end = 0;
};
inline PixelSpan SpanFor(double start, double length, int limit, int margin = 1) {
  const int begin = std::max(0, static_cast<int>(std::floor(start)) - margin);
  const int end = std::min(limit, static_cast<int>(std::ceil(start + length)) + margin);
  return PixelSpan{begin, std::max(begin + 1, end)};
}

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_REGION_H_
