#include "worker/trainer/data/image_decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/image_format.h"
#include "worker/trainer/data/jpeg_decoder.h"
#include "worker/trainer/data/png_decoder.h"

namespace tessera::trainer::data {

absl::Status DecodeImageRegionInto(absl::string_view bytes, const RegionRequest& request,
                                   const DecodeLimits& limits, DecodedRegion& out) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpegRegionInto(bytes, request, limits, out);
    case ImageFormat::kPng:
      return DecodePngRegionInto(bytes, request, limits, out);
    case ImageFormat::kUnknown:
      break;
  }
  if (bytes.empty()) return absl::DataLossError("empty file (0 bytes)");
  return absl::DataLossError(absl::StrCat("not a JPEG or PNG image (", bytes.size(),
                                          " bytes, unknown signature)"));
}

absl::StatusOr<DecodedRegion> DecodeImageRegion(absl::string_view bytes,
                                                const RegionRequest& request,
                                                const DecodeLimits& limits) {
  DecodedRegion out;
  absl::Status status = DecodeImageRegionInto(bytes, request, limits, out);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<DecodedRegion> DecodeImage(absl::string_view bytes,
                                          const DecodeLimits& limits) {
  return DecodeImageRegion(bytes, RegionRequest{}, limits);
}

}  // namespace tessera::trainer::data
