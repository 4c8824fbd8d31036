// Encodes 8-bit pixels as JPEG (libjpeg-turbo) or PNG (libspng). The data
// layer only decodes at training time; these serve the tests, which write their
// images at run time, and the input-pipeline benchmark, which generates its
// ImageNet-size folder.
//
//   ASSIGN_OR_RETURN(std::string jpeg, EncodeJpeg(rgb.data(), 500, 375, 3, 90));
//
// `pixels` is height x width x channels (HWC), channels 1 (grayscale) or 3 (RGB).
// InvalidArgument for a bad shape or quality, Internal for an encoder failure.
// Pure functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_ENCODER_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_ENCODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::trainer::data {

// `quality` in [1, 100]; 4:2:0 chroma subsampling (libjpeg's default), baseline.
// channels 4: CMYK with an Adobe marker, values stored as given (Adobe
// applications store inverted CMYK: 255 - ink).
absl::StatusOr<std::string> EncodeJpeg(const uint8_t* pixels, int width, int height,
                                       int channels, int quality);

// Non-interlaced, 8 bits per channel, grayscale or RGB.
absl::StatusOr<std::string> EncodePng(const uint8_t* pixels, int width, int height,
                                      int channels);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_ENCODER_H_
