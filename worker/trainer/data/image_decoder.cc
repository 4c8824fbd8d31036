#include "worker/trainer/data/image_decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/image_format.h"
#include "worker/trainer/data/jpeg_decoder.h"
#include "worker/trainer/data/png_decoder.h"

namespace tessera::trainer::data {

absl::StatusOr<DecodedRegion> DecodeImageRegion(absl::string_view bytes,
                                                const RegionRequest& request,
                                                const DecodeLimits& limits) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpegRegion(bytes, request, limits);
    case ImageFormat::kPng:
      return DecodePngRegion(bytes, request, limits);
    case ImageFormat::kUnknown:
      break;
  }
  if (bytes.empty()) return absl::DataLossError("empty file (0 bytes)");
  return absl::DataLossError(absl::StrCat("not a JPEG or PNG image (", bytes.size(),
                                          " bytes, unknown signature)"));
}

absl::StatusOr<DecodedRegion> DecodeImage(absl::string_view bytes,
                                          const DecodeLimits& limits) {
  return DecodeImageRegion(bytes, RegionRequest{}, limits);
}

}  // namespace tessera::trainer::data
