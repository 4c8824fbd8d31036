#include "worker/trainer/data/image_split.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/data/image_decoder.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/shard_source.h"

namespace tessera::trainer::data {

absl::StatusOr<std::unique_ptr<ImageSplit>> ImageSplit::Open(
    const ImageSplitOptions& options) {
  std::string kind = options.kind;
  if (kind == "auto") kind = IsShardDataset(options.root) ? "shards" : "imagefolder";
  std::unique_ptr<EncodedImageSource> source;
  if (kind == "shards") {
    ASSIGN_OR_RETURN(source, ShardSource::Open(options.root, options.split));
  } else if (kind == "imagefolder") {
    ASSIGN_OR_RETURN(source, ImageFolder::Open(options.root, options.split));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset kind '", options.kind, "' is not imagefolder, shards or auto"));
  }
  return std::unique_ptr<ImageSplit>(
      new ImageSplit(std::move(kind), std::move(source), options));
}

ImageSplit::ImageSplit(std::string kind, std::unique_ptr<EncodedImageSource> source,
                       const ImageSplitOptions& options)
    : kind_(std::move(kind)),
      source_(std::move(source)),
      skips_(source_->size(), options.max_skipped_fraction, options.log) {}

absl::StatusOr<int64_t> ImageSplit::DecodeInto(int64_t id,
                                               const TransformOptions& transform,
                                               int64_t epoch, uint8_t* out,
                                               DecodeScratch* scratch) const {
  const int64_t n = source_->size();
  if (id < 0 || id >= n) {
    return absl::OutOfRangeError(
        absl::StrCat("sample id ", id, " is outside the split of ", n));
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t candidate = (id + k) % n;
    absl::StatusOr<EncodedSample> sample = source_->Read(candidate);
    absl::Status decoded = sample.status();
    if (sample.ok()) {
      decoded =
          DecodeTransformed(sample->bytes, transform, epoch, candidate, out, scratch);
      if (decoded.ok()) return sample->label;
    }
    RETURN_IF_ERROR(skips_.Skip(
        candidate, absl::StrCat(source_->name(candidate), " (", decoded.message(), ")")));
  }
  return absl::DataLossError("no sample of the split can be read");
}

absl::StatusOr<SampleImage> ImageSplit::DecodeWhole(int64_t id) const {
  // A read error names its sample itself; a decode error does not.
  ASSIGN_OR_RETURN(const EncodedSample sample, source_->Read(id));
  absl::StatusOr<DecodedRegion> image = DecodeImage(sample.bytes);
  if (!image.ok()) {
    return absl::Status(image.status().code(),
                        absl::StrCat(sample.name, ": ", image.status().message()));
  }
  return SampleImage{sample.label, image->source_width, image->source_height};
}

}  // namespace tessera::trainer::data
