#include "worker/trainer/data/image_format.h"

#include "absl/strings/match.h"

namespace tessera::trainer::data {

ImageFormat SniffImageFormat(absl::string_view bytes) {
  constexpr absl::string_view kJpeg("\xFF\xD8\xFF", 3);
  constexpr absl::string_view kPng("\x89PNG\r\n\x1A\n", 8);
  if (absl::StartsWith(bytes, kJpeg)) return ImageFormat::kJpeg;
  if (absl::StartsWith(bytes, kPng)) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

absl::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

absl::string_view ImageFormatExtension(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kUnknown:
      break;
  }
  return "";
}

bool IsImageFileName(absl::string_view name) {
  for (absl::string_view ext : {".jpg", ".jpeg", ".png"}) {
    if (name.size() > ext.size() && absl::EndsWithIgnoreCase(name, ext)) return true;
  }
  return false;
}

}  // namespace tessera::trainer::data
