// Image container formats the data layer reads, told apart by their leading
// bytes (the "magic"), never by a file name: a PNG saved as photo.jpg is a PNG.
//
// Use SniffImageFormat on the encoded bytes before choosing a decoder
// (image_decoder.h does this), and IsImageFileName to pick the files of an image
// folder (case-insensitive .jpg, .jpeg and .png).
//
// Pure functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_FORMAT_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_FORMAT_H_

#include "absl/strings/string_view.h"

namespace tessera::trainer::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };

// The format of `bytes` from its signature: JPEG starts FF D8 FF, PNG with the
// eight-byte PNG signature. kUnknown for anything else, including empty input.
ImageFormat SniffImageFormat(absl::string_view bytes);

// "jpeg", "png" or "unknown".
absl::string_view ImageFormatName(ImageFormat format);

// The usual file extension for the format, without the dot: "jpg" or "png";
// empty for kUnknown. The shard packer names tar members with it.
absl::string_view ImageFormatExtension(ImageFormat format);

// Whether `name` ends in .jpg, .jpeg or .png, in any letter case.
bool IsImageFileName(absl::string_view name);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_FORMAT_H_
