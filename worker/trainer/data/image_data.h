// Image folders and WebDataset-style tar shards as TrainingData
// (training_data.h): the samples stay encoded on disk and are decoded as they
// are loaded, so a rank holds only the batches in flight (the prefetcher's
// queue), whatever the dataset's size.
//
//   ImageDataOptions o;  o.kind = "imagefolder";  o.root = "/data/pets";
//   ASSIGN_OR_RETURN(std::unique_ptr<TrainingData> data, OpenImageData(o));
//   Trainer trainer(options, *data, communicator, reporter, loop);
//
// Kinds (image_split.h opens each split): "imagefolder" reads
// ROOT/train/CLASS/*.{jpg,jpeg,png}, ROOT/val/... and optionally ROOT/test/...;
// "shards" reads ROOT/train-NNNNNN.tar and ROOT/val-NNNNNN.tar (and test-) with
// ROOT/index.json and ROOT/classes.txt (tessera-data pack writes them). Both are random
// access by sample id: a shard member is read at its offset, found once at open by a pass
// over the tar headers. Which ids a rank loads is the trainer's (distributed_sampler.h,
// data_position.h), the same as for every kind.
//
// Transforms (data/transforms.h): training with augmentation takes torchvision's
// RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a horizontal flip, drawn
// from (seed, epoch, sample id); evaluation (and training without
// augmentation) resizes the shorter side to size / crop_fraction and takes the
// centre crop. Images stay uint8 until the trainer's normalise step, with the
// mean and deviation given here (ImageNet's by default), not scanned from the
// data.
//
// Bad samples (image_split.h, skipped_samples.h): a file that cannot be read or
// decoded (unreadable, truncated, zero bytes, not an image) is skipped: the
// next sample id in order takes its place in the batch, so every rank keeps
// its batch count; it is counted (skipped(), reported as the data_skipped
// metric) and named once in the log. When more than max_skipped_fraction of a
// split's samples have been skipped, Load returns DataLoss naming the first
// few, which ends the run with that status.
//
// Immutable after opening but for the skip tally (under a mutex): thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_DATA_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_DATA_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/training_data.h"

namespace tessera::trainer {

// ImageNet's normalisation of [0, 1] pixels, per RGB channel: image data's
// default (trainer.mean, trainer.std).
inline constexpr std::array<double, 3> kImageNetMean = {0.485, 0.456, 0.406};
inline constexpr std::array<double, 3> kImageNetStd = {0.229, 0.224, 0.225};

struct ImageDataOptions {
  std::string kind;  // "imagefolder" | "shards"
  std::string root;
  // Normalisation of [0, 1] pixels, per RGB channel: ImageNet's by default.
  std::vector<float> mean{kImageNetMean.begin(), kImageNetMean.end()};
  std::vector<float> stddev{kImageNetStd.begin(), kImageNetStd.end()};
  // Evaluation: the centre crop's share of the resized shorter side (timm's
  // crop_pct).
  double crop_fraction = 0.875;
  // The resize of every crop to the model's size (crop_resize.h).
  data::Interpolation interpolation = data::Interpolation::kBilinear;
  // Loading fails once more than this share of a split's samples were skipped.
  double max_skipped_fraction = 0.01;
  // Where each skipped sample is named, once; empty: stderr.
  std::function<void(const std::string&)> log;
};

// Whether `dataset` names a kind OpenImageData reads.
bool IsImageDataKind(const std::string& dataset);

// Opens the splits "train" and "val", and "test" where the data has one
// (ROOT/test/, or test-NNNNNN.tar in the index): val is the validation split,
// and serves as the test split too where there is no test (shape().test_is_val).
// NotFound / InvalidArgument naming a
// missing directory, an empty class, a class missing from one split, a
// malformed shard index or tar; before any sample is decoded.
absl::StatusOr<std::unique_ptr<TrainingData>> OpenImageData(
    const ImageDataOptions& options);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_DATA_H_
