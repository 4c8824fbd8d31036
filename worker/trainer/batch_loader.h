// Turns sample indices into model-ready batches: gathers the uint8 images,
// scales them to [0, 1], normalises each channel with the given statistics and,
// when the model expects another size, resizes them bilinearly.
//
// The loader wraps the dataset's memory without copying it, so the ImageDataset
// must outlive it. Assembly is a gather plus a few vectorised ops, small next to
// a training step. Batch reads no shared mutable state; a loader may be used from
// one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_BATCH_LOADER_H_
#define TESSERA_WORKER_TRAINER_BATCH_LOADER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "worker/trainer/image_dataset.h"

namespace tessera::trainer {

struct Batch {
  at::Tensor images;  // float32 [batch, channels, size, size]
  at::Tensor labels;  // int64 [batch]
};

class BatchLoader {
 public:
  // `dataset` is not owned and must outlive the loader. `image_size` is the side
  // length the model expects.
  BatchLoader(const ImageDataset& dataset, const ChannelStats& stats, int image_size);

  // The batch of `indices[begin, end)`; every index must be < dataset.size().
  Batch Load(const std::vector<int64_t>& indices, int64_t begin, int64_t end) const;

 private:
  const ImageDataset& dataset_;  // Not owned.
  const int image_size_;
  at::Tensor images_;   // uint8 [N, C, H, W] over dataset_.pixels
  at::Tensor labels_;   // int64 [N] over dataset_.labels
  at::Tensor mean_;     // float32 [1, C, 1, 1]
  at::Tensor inv_std_;  // float32 [1, C, 1, 1]
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_BATCH_LOADER_H_
