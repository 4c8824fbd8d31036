// Resampling of a box of an 8-bit RGB image (HWC, as the decoders return it)
// to an out_width x out_height image written channel-planar (CHW, the layout of
// the trainer's uint8 [B, 3, H, W] batches), optionally mirrored left-right, in
// one pass over the source rows.
//
// Sample positions are pixel centres mapped into the box (align_corners=False);
// taps outside the image are clamped to its edge, so a box inside a larger
// image reads the real pixels around it, as a resize of the whole image
// followed by a crop does. Two interpolations (trainer.interpolation):
//  - bilinear (the default): two taps per axis with weights in 1/256ths,
//    rounded once at the end;
//  - bicubic: four taps per axis, Keys' cubic convolution with a = -0.75, in
//    float32 and rounded half to even, as torch.nn.functional.interpolate(
//    mode="bicubic", align_corners=False) and so torchvision's
//    Resize(interpolation=BICUBIC) on uint8 tensors compute it.
// Neither antialiases (torchvision's tensor Resize does not by default; PIL's
// resize, which timm's eval transforms use on PIL images, always does, and its
// bicubic uses a = -0.5): when a box is more than twice the output, the JPEG
// decoder's DCT scaling has already reduced it (image_region.h), so the resize
// itself shrinks by less than 2x, where the antialiased and plain kernels
// differ little.
//
// Pure functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_
#define TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/image_region.h"

namespace tessera::trainer::data {

enum class Interpolation { kBilinear, kBicubic };

// "bilinear" or "bicubic" (common/trainer_choices.h's kInterpolationChoices);
// InvalidArgument naming both otherwise.
absl::StatusOr<Interpolation> ParseInterpolation(absl::string_view name);

// Pixels beyond each side of the box that the resize reads: 1 bilinear, 2
// bicubic (RegionRequest::margin).
int ResizeMargin(Interpolation interpolation);

// `src` is src_height x src_width x 3; `out` receives 3 x out_height x out_width.
void ResizeBoxToChw(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                    int out_width, int out_height, bool flip, uint8_t* out,
                    Interpolation interpolation = Interpolation::kBilinear);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_
