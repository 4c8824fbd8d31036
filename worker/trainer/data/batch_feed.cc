#include "worker/trainer/data/batch_feed.h"

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <utility>

#include "common/status_macros.h"
#include "worker/trainer/gpu/device.h"

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
  // The copies on the side stream; null when they ran on the current one.
  std::unique_ptr<DeviceCopyStream::Copies> copied;
};

BatchFeed::BatchFeed(BatchPrefetcher* source, const BatchFeedOptions& options)
    : source_(source),
      options_(options),
      finish_(options.stats, options.image_size, options.interpolation, options.device) {
  if (options_.stage == BatchStage::kDevice)
    side_ = DeviceCopyStream::Create(options_.device);
}

BatchFeed::~BatchFeed() = default;

std::unique_ptr<BatchFeed::Staged> BatchFeed::Stage(const Batch& host) {
  auto staged = std::make_unique<Staged>();
  if (side_ != nullptr) {
    // From pinned memory these copies are asynchronous; the host allocator
    // keeps each pinned block until its copy is done.
    staged->copied = side_->Run(
        [&] { staged->batch = CopyTo(host, options_.device, /*non_blocking=*/true); });
    return staged;
  }
  staged->batch = CopyTo(host, options_.device, /*non_blocking=*/false);
  return staged;
}

Batch BatchFeed::Finish(std::unique_ptr<Staged> staged) {
  Batch& batch = staged->batch;
  if (staged->copied != nullptr) {
    // Allocated on the side stream, used on this one: the caching allocator
    // must not give their blocks to a later copy before this stream is done.
    staged->copied->WaitOnCurrentStream(
        {&batch.images, &batch.labels, &batch.transforms});
  }
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
