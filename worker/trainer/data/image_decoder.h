// Decodes an encoded image (JPEG or PNG, told apart by its bytes: see
// image_format.h) to 8-bit RGB, whole or only the region a crop needs.
//
//   RegionRequest request;
//   request.choose_crop = [&](int w, int h) { return DrawCrop(w, h); };
//   request.out_width = request.out_height = 224;
//   ASSIGN_OR_RETURN(DecodedRegion region, DecodeImageRegion(bytes, request));
//   // region.pixels (HWC RGB) holds region.crop; resize it with crop_resize.h.
//
// Errors: DataLoss for empty, unrecognised, corrupt or truncated input (the
// message says which), InvalidArgument for images beyond DecodeLimits.
//
// Pure functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_DECODER_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_DECODER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/image_region.h"

namespace tessera::trainer::data {

absl::StatusOr<DecodedRegion> DecodeImageRegion(absl::string_view bytes,
                                                const RegionRequest& request,
                                                const DecodeLimits& limits = {});

// The same into `out`, whose pixel buffer is reused: a decode thread that keeps
// one DecodedRegion across images allocates (and faults in) its pixel memory
// once, not per image. On error `out` is left unspecified.
absl::Status DecodeImageRegionInto(absl::string_view bytes, const RegionRequest& request,
                                   const DecodeLimits& limits, DecodedRegion& out);

// The whole image at full size (no crop, no scaling).
absl::StatusOr<DecodedRegion> DecodeImage(absl::string_view bytes,
                                          const DecodeLimits& limits = {});

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_DECODER_H_
