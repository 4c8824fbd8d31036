// One split ("train" or "val") of an image folder or a tar shard dataset, read
// the way tessera-train reads it: samples by id, each decoded (only the region
// its crop needs) and transformed straight into the caller's uint8 buffer
// (transforms.h), a bad sample skipped under the split's one policy
// (skipped_samples.h). The trainer's loaders (image_data.h) and tessera-data
// check (dataset_check.h) both open their splits here, so they read the same
// files, in the same order, and fail on the same ones.
//
//   ImageSplitOptions o;  o.kind = "imagefolder";  o.root = "/data/pets";
//   ASSIGN_OR_RETURN(std::unique_ptr<ImageSplit> train, ImageSplit::Open(o));
//   ASSIGN_OR_RETURN(int64_t label,
//                    train->DecodeInto(id, transform, epoch, out, &scratch));
//
// Kinds: "imagefolder" (image_folder.h: ROOT/SPLIT/CLASS/*.{jpg,jpeg,png}),
// "shards" (shard_source.h: ROOT/SPLIT-NNNNNN.tar, ROOT/index.json,
// ROOT/classes.txt), or "auto": shards when ROOT/index.json exists.
//
// Bad samples: when sample id cannot be read or decoded it is skipped (counted
// and named once) and the next id in order, wrapping, takes its place, so a
// batch keeps its size and every rank its batch count. Past the split's
// max_skipped_fraction, DecodeInto fails with DataLoss naming the first few.
//
// Immutable after Open but for the skip tally (under its own mutex):
// thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_SPLIT_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_SPLIT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/encoded_image_source.h"
#include "worker/trainer/data/skipped_samples.h"
#include "worker/trainer/data/transforms.h"

namespace tessera::trainer::data {

struct ImageSplitOptions {
  std::string kind = "auto";  // "imagefolder" | "shards" | "auto"
  std::string root;
  std::string split = "train";
  // Decoding fails once more than this share of the split's samples were
  // skipped (--data-max-skipped).
  double max_skipped_fraction = 0.01;
  // Names each skipped sample, once; empty: stderr.
  std::function<void(const std::string&)> log;
};

// What a whole decode of one sample found.
struct SampleImage {
  int64_t label = 0;
  int width = 0;
  int height = 0;
};

class ImageSplit {
 public:
  // NotFound / InvalidArgument naming a missing directory, an empty class, a
  // malformed shard index or tar, or an unknown kind; before any decode.
  static absl::StatusOr<std::unique_ptr<ImageSplit>> Open(
      const ImageSplitOptions& options);

  const std::string& kind() const { return kind_; }  // "imagefolder" | "shards"
  int64_t size() const { return source_->size(); }
  const std::vector<std::string>& class_names() const { return source_->class_names(); }

  // Sample `id` in [0, size()), or the next readable one after it, decoded
  // and transformed as `transform` draws it in `epoch`, into `out` (3 x size x
  // size); its label. DataLoss once too many samples were skipped. `scratch`
  // is the calling thread's decode memory (may be null).
  absl::StatusOr<int64_t> DecodeInto(int64_t id, const TransformOptions& transform,
                                     int64_t epoch, uint8_t* out,
                                     DecodeScratch* scratch) const;

  // Reads sample `id` and decodes it whole (a region decode would miss damage
  // below a crop); the error, naming the sample, is exactly what makes
  // DecodeInto skip it. Nothing is counted.
  absl::StatusOr<SampleImage> DecodeWhole(int64_t id) const;

  // Samples skipped so far.
  int64_t skipped() const { return skips_.count(); }

 private:
  ImageSplit(std::string kind, std::unique_ptr<EncodedImageSource> source,
             const ImageSplitOptions& options);

  const std::string kind_;
  const std::unique_ptr<EncodedImageSource> source_;
  mutable SkippedSamples skips_;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_SPLIT_H_
