// The random-access view of a dataset split whose samples are encoded images:
// a fixed number of samples, each with a class label and a name for messages,
// and a Read that returns the encoded bytes (decoded later, image_decoder.h).
// An image folder (image_folder.h) is one; the in-memory datasets and others
// can be added behind the same interface.
//
// Implementations are immutable after opening: every method may be called
// from any number of threads at once.
#ifndef TESSERA_WORKER_TRAINER_DATA_ENCODED_IMAGE_SOURCE_H_
#define TESSERA_WORKER_TRAINER_DATA_ENCODED_IMAGE_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer::data {

struct EncodedSample {
  std::string bytes;  // the encoded image (JPEG or PNG)
  int64_t label = 0;  // class index into class_names()
  std::string name;   // where it came from (a path, or shard:member), for messages
};

class EncodedImageSource {
 public:
  virtual ~EncodedImageSource() = default;

  virtual int64_t size() const = 0;
  // Class index -> name; the index is the label.
  virtual const std::vector<std::string>& class_names() const = 0;
  // Label and name of sample `index` in [0, size()), without reading it.
  virtual int64_t label(int64_t index) const = 0;
  virtual std::string name(int64_t index) const = 0;
  // The sample's bytes. NotFound, PermissionDenied or DataLoss (naming the
  // sample) when it cannot be read; the caller skips such samples.
  virtual absl::StatusOr<EncodedSample> Read(int64_t index) const = 0;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_ENCODED_IMAGE_SOURCE_H_
