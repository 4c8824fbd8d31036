// A generated image classification dataset for tests and for runs without data
// files: every class has a template (a random on/off pattern on a coarse grid,
// upsampled bilinearly), and each image is its class's template at a random
// contrast and brightness plus pixel noise. It is learnable (a small ViT
// separates the classes in a few hundred steps) yet not trivially so.
//
// Fully determined by the options: the templates by `seed`, image i of a split by
// (seed, split, i), so a smaller `size` yields a prefix of a larger one. Pure
// function: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_SYNTHETIC_DATASET_H_
#define TESSERA_WORKER_TRAINER_DATA_SYNTHETIC_DATASET_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

struct SyntheticDatasetOptions {
  int64_t size = 0;  // images to generate; 0: the split's default below
  int64_t default_train_size = 10000;
  int64_t default_test_size = 2000;
  int64_t max_size = 10'000'000;  // larger requests are rejected
  int channels = 1;
  int height = 28;
  int width = 28;
  int num_classes = 10;
  int template_grid = 4;       // templates are bilinear upsamplings of a grid x grid
                               // pattern of 0s and 1s
  double noise_stddev = 0.12;  // pixel noise, in units of the [0, 1] range
  int64_t seed = 0;
  Split split = Split::kTrain;
};

// InvalidArgument for non-positive shapes or a size above max_size.
absl::StatusOr<ImageDataset> MakeSyntheticDataset(const SyntheticDatasetOptions& options);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_SYNTHETIC_DATASET_H_
