// Turns sample indices into model-ready batches: gathers the uint8 images
// (applying the training augmentation of augmentation.h when enabled), scales
// them to [0, 1], normalises each channel with the given statistics and, when the
// model expects another size, resizes them bilinearly (torch interpolate, per
// batch: the dataset itself stays at its native size and in uint8).
//
// The loader wraps the dataset's memory without copying it, so the ImageDataset
// must outlive it. Load reads no mutable state: one loader may serve any number
// of threads at once (batch_prefetcher.h runs it on background threads).
#ifndef TESSERA_WORKER_TRAINER_BATCH_LOADER_H_
#define TESSERA_WORKER_TRAINER_BATCH_LOADER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "worker/trainer/augmentation.h"
#include "worker/trainer/image_dataset.h"

namespace tessera::trainer {

struct Batch {
  at::Tensor images;  // float32 [batch, channels, size, size]
  at::Tensor labels;  // int64 [batch]
};

struct BatchLoaderOptions {
  // Side length the model expects; images of another size are resized.
  int image_size = 28;
  // Random crop and flip (training only). Each image's draw depends on (seed,
  // epoch, dataset index): see augmentation.h.
  bool augment = false;
  AugmentationOptions augmentation;
  uint64_t seed = 0;
};

class BatchLoader {
 public:
  // `dataset` is not owned and must outlive the loader. No augmentation.
  BatchLoader(const ImageDataset& dataset, const ChannelStats& stats, int image_size);
  BatchLoader(const ImageDataset& dataset, const ChannelStats& stats,
              const BatchLoaderOptions& options);

  // The batch of `indices[begin, end)`, augmented (when on) as in `epoch`. Every
  // index must be in [0, dataset.size()); a LibTorch error (c10::Error) is thrown
  // otherwise.
  Batch Load(const std::vector<int64_t>& indices, int64_t begin, int64_t end,
             int64_t epoch = 0) const;

  const BatchLoaderOptions& options() const { return options_; }

 private:
  const ImageDataset& dataset_;  // Not owned.
  const BatchLoaderOptions options_;
  at::Tensor mean_;     // float32 [1, C, 1, 1]
  at::Tensor inv_std_;  // float32 [1, C, 1, 1]
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_BATCH_LOADER_H_
