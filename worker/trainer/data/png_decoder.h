// PNG decoding through libspng, limited to the rows a crop needs: rows are
// decoded one at a time and decoding stops after the crop's last row; only the
// crop's columns (with a one-pixel margin for bilinear sampling) are kept.
// Interlaced images are decoded whole and then cut. Every colour type and bit
// depth becomes 8-bit RGB; an alpha channel is dropped (not composited), as
// PIL's convert("RGB") does.
//
// Errors: DataLoss for corrupt or truncated data (bad CRC, bad zlib stream,
// missing chunks), InvalidArgument for images beyond DecodeLimits.
//
// Pure function: thread-safe (each call has its own libspng context).
#ifndef TESSERA_WORKER_TRAINER_DATA_PNG_DECODER_H_
#define TESSERA_WORKER_TRAINER_DATA_PNG_DECODER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/image_region.h"

namespace tessera::trainer::data {

absl::StatusOr<DecodedRegion> DecodePngRegion(absl::string_view bytes,
                                              const RegionRequest& request,
                                              const DecodeLimits& limits = {});

// The same into `out`, whose pixel buffer is reused (resized, not reallocated
// while it is large enough). On error `out` is left unspecified.
absl::Status DecodePngRegionInto(absl::string_view bytes, const RegionRequest& request,
                                 const DecodeLimits& limits, DecodedRegion& out);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_PNG_DECODER_H_
