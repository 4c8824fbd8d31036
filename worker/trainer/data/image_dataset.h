// In-memory image classification data: the train or test split of one dataset as
// raw 8-bit pixels plus integer labels, and the dispatch from a dataset name
// (--dataset) to its loader (idx_reader.h, cifar_reader.h, synthetic_dataset.h).
//
// Pixels stay uint8 in memory (a quarter of float32); batch_loader.h converts and
// normalises per batch. An ImageDataset is a value: immutable after loading and
// safe to read from any number of threads.
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_DATASET_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::trainer {

// kVal is the validation split: image folders' val/, or the part of the
// training set trainer.val_fraction holds out (validation_split.h).
enum class Split { kTrain, kTest, kVal };

struct ImageDataset {
  int channels = 0;
  int height = 0;
  int width = 0;
  int num_classes = 0;
  std::vector<uint8_t> pixels;  // size() * channels * height * width, NCHW order
  std::vector<int64_t> labels;  // one per image, in [0, num_classes)

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t image_bytes() const { return int64_t{channels} * height * width; }
};

// Per-channel mean and standard deviation of pixel values scaled to [0, 1].
struct ChannelStats {
  std::vector<float> mean;
  std::vector<float> stddev;
};

// Every dataset name the trainer takes: the in-memory ones LoadImageDataset
// (dataset_loader.h) reads, and the kinds decoded as they are read
// (IsEncodedImageDataset).
const std::vector<std::string>& KnownDatasets();

// "imagefolder" and "shards": a lab's own images, decoded as they are read
// (image_data.h) rather than held in memory.
bool IsEncodedImageDataset(const std::string& name);

// Whether training-time augmentation (random crop and flip, augmentation.h) is on
// when the job leaves it unset: on for the CIFAR datasets, whose recipes all use
// it, off otherwise.
bool AugmentsByDefault(const std::string& dataset_name);

// Checks internal consistency: positive shape, pixel count matching the labels,
// labels in range. Loaders call it before returning.
absl::Status ValidateImageDataset(const ImageDataset& dataset);

// Statistics over all pixels of `dataset` (normally the training split, applied
// to both splits so they are normalised alike). A zero deviation is reported as 1.
ChannelStats ComputeChannelStats(const ImageDataset& dataset);

// `computed` with its mean and deviation replaced by the ones given (trainer.mean
// and trainer.std: three values, R G B; empty keeps the computed ones), as an
// evaluation of published weights gives the normalisation they were trained
// with. A one-channel dataset takes three equal values; a deviation must be
// positive.
absl::StatusOr<ChannelStats> OverrideChannelStats(ChannelStats computed,
                                                  const std::vector<double>& mean,
                                                  const std::vector<double>& stddev);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_DATASET_H_
