// Bilinear resampling of a box of an 8-bit RGB image (HWC, as the decoders
// return it) to an out_width x out_height image written channel-planar (CHW,
// the layout of the trainer's uint8 [B, 3, H, W] batches), optionally mirrored
// left-right, in one pass and without intermediate copies.
//
// Sample positions are pixel centres mapped into the box (align_corners=False);
// taps outside the image are clamped to its edge. There is no antialiasing:
// when a box is more than twice the output, the JPEG decoder's DCT scaling has
// already reduced it (image_region.h), so the resize itself shrinks by less
// than 2x, where bilinear and PIL's antialiased bilinear differ little.
//
// Pure function: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_
#define TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_

#include <cstdint>

#include "worker/trainer/data/image_region.h"

namespace tessera::trainer::data {

// `src` is src_height x src_width x 3; `out` receives 3 x out_height x out_width.
void ResizeBoxToChw(const uint8_t* src, int src_width, int src_height, const CropBox& box,
                    int out_width, int out_height, bool flip, uint8_t* out);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_CROP_RESIZE_H_
