// JPEG decoding through libjpeg-turbo's libjpeg API, limited to the region a
// crop needs: DCT scaling (1/2, 1/4, 1/8) when the crop is at least twice the
// output size, rows above the crop skipped (jpeg_skip_scanlines), decoding
// stopped after its last row, and columns limited to it (jpeg_crop_scanline,
// which widens to iMCU boundaries). Grayscale becomes RGB; CMYK and YCCK
// (Adobe, inverted or not) are converted to RGB.
//
// Errors: DataLoss for corrupt or truncated data (libjpeg's fatal errors and
// its corrupt-data warnings, caught through an error manager that longjmps; the
// process never exits), InvalidArgument for images beyond DecodeLimits. A
// truncation below the crop's last row is not seen by a region decode (decoding
// stops there); a full decode (no choose_crop) sees every truncation.
//
// Pure function: thread-safe (each call has its own libjpeg state).
#ifndef TESSERA_WORKER_TRAINER_DATA_JPEG_DECODER_H_
#define TESSERA_WORKER_TRAINER_DATA_JPEG_DECODER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/image_region.h"

namespace tessera::trainer::data {

absl::StatusOr<DecodedRegion> DecodeJpegRegion(absl::string_view bytes,
                                               const RegionRequest& request,
                                               const DecodeLimits& limits = {});

// The largest DCT scale denominator in {1, 2, 4, 8} such that the crop scaled
// by 1/denominator still covers out_width x out_height (1 when either is 0).
// The same into `out`, whose pixel buffer is reused (resized, not reallocated
// while it is large enough). On error `out` is left unspecified.
absl::Status DecodeJpegRegionInto(absl::string_view bytes, const RegionRequest& request,
                                  const DecodeLimits& limits, DecodedRegion& out);

int ChooseDctScaleDenom(const CropBox& crop, int out_width, int out_height);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_JPEG_DECODER_H_
