// The training and evaluation image transforms, as torchvision and timm define
// them, from encoded bytes to one uint8 CHW image of the model's size:
//  - training: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) then
//    RandomHorizontalFlip(p=0.5);
//  - evaluation: Resize(floor(size / crop_fraction)) of the shorter side then
//    CenterCrop(size) (timm's crop_pct; 0.875 by default: 256 -> 224).
// The crop is decided from the image header before decoding, so the decoder
// decodes only that region (image_region.h), and the resize is bilinear or
// bicubic without antialiasing (crop_resize.h).
//
// Reproducibility: a sample's draw is a pure function of (seed, epoch, sample
// id), never of the rank, the thread or the order in which samples are
// processed, so resumed and re-sharded runs augment every sample alike.
//
//   TransformOptions t;  t.train = true;  t.size = 224;  t.seed = job_seed;
//   uint8_t* dst = batch.pixels.data() + i * 3 * 224 * 224;
//   RETURN_IF_ERROR(DecodeTransformed(bytes, t, epoch, sample_id, dst));
//
// Pure functions and a value-type generator: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_TRANSFORMS_H_
#define TESSERA_WORKER_TRAINER_DATA_TRANSFORMS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_region.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer::data {

struct RandomResizedCropOptions {
  double scale_min = 0.08;  // of the image's area
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // width / height, drawn log-uniformly
  double ratio_max = 4.0 / 3.0;
  int attempts = 10;  // then the centre-crop fallback
};

// torchvision's RandomResizedCrop.get_params on a width x height image: up to
// `attempts` draws of (area, log-ratio), the first that fits wins (sizes
// rounded half-to-even, as Python's round; offsets uniform); else the centre
// crop of the whole image clamped to the ratio range. Integer-valued box.
CropBox DrawRandomResizedCrop(const RandomResizedCropOptions& options, int width,
                              int height, SampleRng& rng);

// The evaluation crop in source pixels: the image resized so its shorter side is
// floor(size / crop_fraction) (the longer side scaled and truncated, as
// torchvision's Resize), then the centre size x size (offsets rounded as
// CenterCrop), mapped back to the source.
CropBox EvalCenterCrop(int width, int height, int size, double crop_fraction);

struct TransformOptions {
  bool train = true;  // RandomResizedCrop + flip; false: evaluation crop
  int size = 224;     // output side length
  uint64_t seed = 0;  // the job seed
  RandomResizedCropOptions crop;
  double flip_probability = 0.5;                           // training only
  double crop_fraction = 0.875;                            // evaluation only, in (0, 1]
  Interpolation interpolation = Interpolation::kBilinear;  // the resize
};

// One sample's draw (the crop in source pixels, and the mirror).
struct SampleDraw {
  CropBox crop;
  bool flip = false;
};

SampleDraw DrawSampleTransform(const TransformOptions& options, int64_t epoch,
                               int64_t sample_id, int width, int height);

// What a decode thread keeps between images: the last decoded region, whose
// pixel buffer the next image reuses, so a thread allocates and faults in its
// decode memory once rather than per image. A buffer grown past kKeepBytes (an
// unusually large image) is released after that image, so a thread keeps at
// most kKeepBytes. One per thread: not thread-safe.
class DecodeScratch {
 public:
  static constexpr size_t kKeepBytes = size_t{8} << 20;

  DecodedRegion& region() { return region_; }
  // Bytes held between images.
  size_t capacity() const { return region_.pixels.capacity(); }
  // Releases the buffer when it is over kKeepBytes.
  void Trim();

 private:
  DecodedRegion region_;
};

// Decodes `bytes` (only the region the draw crops) and writes the transformed
// image, 3 x size x size, to `out`, decoding into `scratch` when given.
// DataLoss/InvalidArgument from the decoder (image_decoder.h); `out` is then
// left unspecified.
absl::Status DecodeTransformed(absl::string_view bytes, const TransformOptions& options,
                               int64_t epoch, int64_t sample_id, uint8_t* out,
                               DecodeScratch* scratch = nullptr);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_TRANSFORMS_H_
