// One rank's samples of one epoch, in visiting order, as the decode pipeline
// (batch_pipeline.h) consumes them: a known count, then Read(k) for each k.
// data_source.h makes them for both dataset kinds.
//
// Thread safety: a random-access stream (sequential() false) may be read from
// any number of threads at once, in any order. A sequential stream (tar
// shards) must be read for k = 0, 1, 2, ... in order, one call at a time; the
// pipeline serialises those calls.
#ifndef TESSERA_WORKER_TRAINER_DATA_SAMPLE_STREAM_H_
#define TESSERA_WORKER_TRAINER_DATA_SAMPLE_STREAM_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/trainer/data/encoded_image_source.h"

namespace tessera::trainer::data {

struct StreamSample {
  EncodedSample sample;
  // A stable id of the sample in its split (its index in the folder, or its
  // shard's first index plus its position): keys its augmentation draw.
  int64_t id = 0;
};

class SampleStream {
 public:
  virtual ~SampleStream() = default;

  // Samples this rank visits (Read is called for k in [0, size())).
  virtual int64_t size() const = 0;
  virtual bool sequential() const = 0;
  // Sample k. An error (DataLoss, NotFound, ...) names the sample; the caller
  // skips it and the stream stays usable for k + 1.
  virtual absl::StatusOr<StreamSample> Read(int64_t k) = 0;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SAMPLE_STREAM_H_
