// Hands the training loop its batches on the training device.
//
// Batches of a host-stage loader (the CPU path, batch_loader.h) are already
// model-ready; the feed passes them through (a move to the device, which on the
// CPU is a no-op). Raw batches of a device-stage loader (uint8 at the dataset's
// native size, with their crops and flips still to apply) are copied to the
// device and finished there by an ImagePreprocessor (image_preprocessor.h).
//
// Next() issues the copy of the batch after the one it returns. On a CUDA
// device the copies come from the loaders' pinned memory with non_blocking on
// a side stream, so that copy overlaps the returned batch's compute, and the
// compute stream waits for a batch's copy on an event recorded after it. The
// finishing kernels run on the compute stream (the current stream of the
// device at the time of the call). Elsewhere copies are plain and in order.
//
// A BatchFeed is used from one thread at a time (the training loop's).
// LibTorch errors surface as c10::Error.
#ifndef TESSERA_WORKER_TRAINER_DATA_BATCH_FEED_H_
#define TESSERA_WORKER_TRAINER_DATA_BATCH_FEED_H_

#include <c10/core/Device.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/batch_prefetcher.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/image_preprocessor.h"

namespace tessera::trainer {

class DeviceCopyStream;  // gpu/device.h

struct BatchFeedOptions {
  // The training device: batches come out there.
  c10::Device device = c10::Device(c10::kCPU);
  // The stage of the loaders whose batches the feed takes.
  BatchStage stage = BatchStage::kHost;
  // Normalisation statistics, the model's input size and the resize to it,
  // for raw batches (as the loaders' BatchLoaderOptions).
  ChannelStats stats;
  int image_size = 28;
  data::Interpolation interpolation = data::Interpolation::kBilinear;
  // Raw batches: Next() stages the batch after the one it returns before
  // finishing that one (on CUDA its copy then overlaps the returned batch's
  // compute). Off: each batch is copied when it is asked for.
  bool copy_ahead = true;
};

class BatchFeed {
 public:
  // `source` is not owned and must outlive the feed; null for a feed that only
  // serves ToDevice.
  BatchFeed(BatchPrefetcher* source, const BatchFeedOptions& options);
  ~BatchFeed();

  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  // The source's next batch, model-ready on the device; the source's status
  // (OutOfRange after its last batch) otherwise. A source failure on the batch
  // after the returned one is reported by the next call.
  absl::StatusOr<Batch> Next();

  // `batch` (from a loader of the feed's stage) model-ready on the device.
  Batch ToDevice(const Batch& batch);

  // Whether Next() stages one batch ahead (raw batches with copy_ahead).
  bool copies_ahead() const {
    return options_.copy_ahead && options_.stage == BatchStage::kDevice;
  }

 private:
  struct Staged;  // a batch copied or being copied to the device

  std::unique_ptr<Staged> Stage(const Batch& host);
  Batch Finish(std::unique_ptr<Staged> staged);

  BatchPrefetcher* const source_;  // Not owned; may be null.
  const BatchFeedOptions options_;
  const ImagePreprocessor finish_;          // on options_.device
  std::unique_ptr<DeviceCopyStream> side_;  // null: copies on the current stream
  std::unique_ptr<Staged> ahead_;           // the next batch, already on its way
  absl::Status deferred_;                   // the source's status after ahead_
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_BATCH_FEED_H_
