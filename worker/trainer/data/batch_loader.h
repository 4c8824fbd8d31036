// Turns sample indices into batches. Where the rest of the preparation runs is
// the loader's stage:
//  - host (the CPU path): gathers the uint8 images (applying the training
//    augmentation of augmentation.h when enabled) and finishes them with an
//    ImagePreprocessor on the loader's thread: scaled to [0, 1], normalised per
//    channel, resized (bilinearly or bicubically) when the model expects
//    another size. The batch is model-ready float32 on the CPU.
//  - device (the CUDA path): gathers the uint8 images at the dataset's native
//    size, with their labels and each image's drawn crop/flip (not applied), in
//    pinned memory when asked; the consumer copies them to its device and
//    finishes them there (batch_feed.h).
// The dataset itself stays at its native size and in uint8.
//
// The loader wraps the dataset's memory without copying it, so the ImageDataset
// must outlive it. Load reads no mutable state: one loader may serve any number
// of threads at once (batch_prefetcher.h runs it on background threads).
#ifndef TESSERA_WORKER_TRAINER_DATA_BATCH_LOADER_H_
#define TESSERA_WORKER_TRAINER_DATA_BATCH_LOADER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/augmentation.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/image_preprocessor.h"

namespace tessera::trainer {

struct Batch {
  // float32 [batch, channels, size, size], model-ready; in a raw batch (a
  // device-stage loader's), uint8 [batch, channels, height, width] at the
  // dataset's native size.
  at::Tensor images;
  at::Tensor labels;  // int64 [batch]
  // Raw batches of an augmenting loader: int64 [batch, 3], each image's crop
  // and flip still to apply (ApplyImageTransforms). Undefined otherwise.
  at::Tensor transforms;
};

// Where a loader's batches are finished (converted, normalised, resized).
enum class BatchStage {
  kHost,    // by the loader: model-ready float32 CPU batches
  kDevice,  // by the consumer on its device: raw uint8 batches
};

struct BatchLoaderOptions {
  // Side length the model expects; images of another size are resized with
  // `interpolation` (ImagePreprocessor). Image folders and shards are decoded
  // at this size with their own (ImageDataOptions::interpolation).
  int image_size = 28;
  data::Interpolation interpolation = data::Interpolation::kBilinear;
  // Random crop and flip (training only). Each image's draw depends on (seed,
  // epoch, dataset index): see augmentation.h.
  bool augment = false;
  AugmentationOptions augmentation;
  uint64_t seed = 0;
  // kHost: Load returns finished batches. kDevice: raw ones (see Batch).
  BatchStage stage = BatchStage::kHost;
  // Raw batches in pinned (page-locked) host memory, so that a copy to a CUDA
  // device can be asynchronous. Needs a LibTorch with CUDA and a visible GPU.
  bool pin_memory = false;
};

// Turns sample ids of one split into a batch (finished or raw as the loader's
// stage says). Every kind of training data (training_data.h) provides one.
class SampleLoader {
 public:
  virtual ~SampleLoader() = default;
  // The batch of ids[begin, end), augmented as in `epoch` when augmentation is
  // on. Thread-safe. OutOfRange for a range outside `ids` or an id outside
  // the split; DataLoss when the data cannot be read (image_data.h). LibTorch
  // allocates the batch and may throw c10::Error (out of memory); the
  // prefetcher, the edge of its threads, turns that into a status too.
  virtual absl::StatusOr<Batch> Load(const std::vector<int64_t>& ids, int64_t begin,
                                     int64_t end, int64_t epoch) const = 0;
};

class BatchLoader final : public SampleLoader {
 public:
  // `dataset` is not owned and must outlive the loader. No augmentation.
  BatchLoader(const ImageDataset& dataset, const ChannelStats& stats, int image_size);
  BatchLoader(const ImageDataset& dataset, const ChannelStats& stats,
              const BatchLoaderOptions& options);

  // The batch of `indices[begin, end)`, augmented (when on) as in `epoch`:
  // finished or raw as the stage says. OutOfRange unless every index is in
  // [0, dataset.size()).
  absl::StatusOr<Batch> Load(const std::vector<int64_t>& indices, int64_t begin,
                             int64_t end, int64_t epoch) const override;
  absl::StatusOr<Batch> Load(const std::vector<int64_t>& indices, int64_t begin,
                             int64_t end) const {
    return Load(indices, begin, end, 0);
  }

  const BatchLoaderOptions& options() const { return options_; }

 private:
  const ImageDataset& dataset_;  // Not owned.
  const BatchLoaderOptions options_;
  const ImagePreprocessor finish_;  // on the CPU; the host stage's last step
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_BATCH_LOADER_H_
