#include "worker/trainer/data/batch_feed.h"

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <utility>

#include "common/status_macros.h"

#if TESSERA_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tessera::trainer {
namespace {

Batch CopyTo(const Batch& batch, const c10::Device& device, bool non_blocking) {
  Batch out;
  out.images = batch.images.to(device, non_blocking);
  out.labels = batch.labels.to(device, non_blocking);
  if (batch.transforms.defined())
    out.transforms = batch.transforms.to(device, non_blocking);
  return out;
}

}  // namespace

struct BatchFeed::Staged {
  Batch batch;  // on the device
#if TESSERA_TORCH_CUDA
  // Recorded on the side stream after the batch's copies.
  std::optional<at::cuda::CUDAEvent> copied;
#endif
};

#if TESSERA_TORCH_CUDA
struct BatchFeed::CudaCopies {
  explicit CudaCopies(c10::DeviceIndex device)
      : side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}
  c10::cuda::CUDAStream side;
};
#else
struct BatchFeed::CudaCopies {};
#endif

BatchFeed::BatchFeed(BatchPrefetcher* source, const BatchFeedOptions& options)
    : source_(source),
      options_(options),
      finish_(options.stats, options.image_size, options.device) {
#if TESSERA_TORCH_CUDA
  if (options_.device.is_cuda() && options_.stage == BatchStage::kDevice) {
    cuda_ = std::make_unique<CudaCopies>(options_.device.index());
  }
#endif
}

BatchFeed::~BatchFeed() = default;

std::unique_ptr<BatchFeed::Staged> BatchFeed::Stage(const Batch& host) {
  auto staged = std::make_unique<Staged>();
#if TESSERA_TORCH_CUDA
  if (cuda_ != nullptr) {
    // From pinned memory these copies are asynchronous; the host allocator
    // keeps each pinned block until its copy is done.
    const c10::cuda::CUDAStreamGuard on_side(cuda_->side);
    staged->batch = CopyTo(host, options_.device, /*non_blocking=*/true);
    staged->copied.emplace();
    staged->copied->record(cuda_->side);
    return staged;
  }
#endif
  staged->batch = CopyTo(host, options_.device, /*non_blocking=*/false);
  return staged;
}

Batch BatchFeed::Finish(std::unique_ptr<Staged> staged) {
  Batch& batch = staged->batch;
#if TESSERA_TORCH_CUDA
  if (staged->copied.has_value()) {
    const c10::cuda::CUDAStream compute =
        c10::cuda::getCurrentCUDAStream(options_.device.index());
    staged->copied->block(compute);
    // Allocated on the side stream, used on this one: the caching allocator
    // must not give their blocks to a later copy before this stream is done.
    for (const at::Tensor* t : {&batch.images, &batch.labels, &batch.transforms}) {
      if (t->defined()) t->record_stream(compute);
    }
  }
#endif
  if (options_.stage == BatchStage::kHost) return batch;
  return Batch{finish_(batch.images, batch.transforms), batch.labels, {}};
}

absl::StatusOr<Batch> BatchFeed::Next() {
  if (source_ == nullptr) return absl::FailedPreconditionError("this feed has no source");
  if (!copies_ahead()) {
    ASSIGN_OR_RETURN(const Batch batch, source_->Next());
    return Finish(Stage(batch));
  }
  if (ahead_ == nullptr) {
    RETURN_IF_ERROR(deferred_);
    ASSIGN_OR_RETURN(const Batch first, source_->Next());
    ahead_ = Stage(first);
  }
  std::unique_ptr<Staged> current = std::move(ahead_);
  // The next batch's copy goes out now and overlaps this one's compute.
  absl::StatusOr<Batch> next = source_->Next();
  if (next.ok()) {
    ahead_ = Stage(*next);
  } else {
    deferred_ = next.status();
  }
  return Finish(std::move(current));
}

Batch BatchFeed::ToDevice(const Batch& batch) { return Finish(Stage(batch)); }

}  // namespace tessera::trainer
