#include "worker/trainer/data/batch_prefetcher.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {
namespace {

absl::Status ProducerFailure(int64_t position, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("preparing batch ", position,
                                                  " failed: ", status.message()));
}

// Each epoch's shard indices, computed once and shared by the workers. Keeps the
// two most recent epochs: workers straddle at most one epoch boundary while the
// queue is shorter than an epoch.
class EpochIndexCache {
 public:
  explicit EpochIndexCache(const DistributedSampler& sampler) : sampler_(sampler) {}

  std::shared_ptr<const std::vector<int64_t>> Get(int64_t epoch) {
    absl::MutexLock lock(&mu_);
    auto it = epochs_.find(epoch);
    if (it != epochs_.end()) return it->second;
    if (epochs_.size() >= 2) epochs_.erase(epochs_.begin());
    auto indices =
        std::make_shared<const std::vector<int64_t>>(sampler_.EpochIndices(epoch));
    epochs_.emplace(epoch, indices);
    return indices;
  }

 private:
  const DistributedSampler& sampler_;  // Not owned.
  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> epochs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

BatchPrefetcher::BatchPrefetcher(Producer produce, int64_t first, int64_t count,
                                 const BatchPrefetcherOptions& options)
    : produce_(std::move(produce)),
      end_(first + std::max<int64_t>(0, count)),
      depth_(std::max(
          1, options.queue_depth > 0 ? options.queue_depth : 2 * options.workers)),
      next_claim_(first),
      next_deliver_(first) {
  for (int i = 0; i < options.workers; ++i) {
    workers_.emplace_back([this, start = options.on_worker_start] {
      if (start) start();
      WorkerLoop();
    });
  }
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

int64_t BatchPrefetcher::position() const {
  absl::MutexLock lock(&mu_);
  return next_deliver_;
}

bool BatchPrefetcher::CanClaimOrMustExit() const {
  return stopping_ || failed_position_ != std::numeric_limits<int64_t>::max() ||
         next_claim_ >= end_ || next_claim_ < next_deliver_ + depth_;
}

bool BatchPrefetcher::NextIsSettled() const {
  return ready_.count(next_deliver_) > 0 || failed_position_ <= next_deliver_;
}

void BatchPrefetcher::WorkerLoop() {
  // A new thread starts with LibTorch's default intra-op parallelism; follow the
  // count the trainer configured so workers do not oversubscribe the cores.
  at::init_num_threads();
  while (true) {
    int64_t position = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BatchPrefetcher::CanClaimOrMustExit));
      if (stopping_ || failed_position_ != std::numeric_limits<int64_t>::max() ||
          next_claim_ >= end_) {
        return;
      }
      position = next_claim_++;
    }
    absl::StatusOr<Batch> batch = ProduceHere(position);
    absl::MutexLock lock(&mu_);
    if (batch.ok()) {
      ready_.emplace(position, *std::move(batch));
    } else if (position < failed_position_) {
      failed_position_ = position;
      failure_ = batch.status();
    }
  }
}

absl::StatusOr<Batch> BatchPrefetcher::ProduceHere(int64_t position) {
  absl::StatusOr<Batch> batch = absl::UnknownError("not produced");
  try {
    batch = produce_(position);
  } catch (const c10::Error& e) {
    batch = absl::InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {  // std::bad_alloc from LibTorch's allocations
    batch = absl::InternalError(e.what());
  }
  if (!batch.ok()) return ProducerFailure(position, batch.status());
  return batch;
}

absl::StatusOr<Batch> BatchPrefetcher::Next() {
  if (workers_.empty()) {
    int64_t position = 0;
    {
      absl::MutexLock lock(&mu_);
      if (failed_position_ <= next_deliver_) return failure_;
      if (next_deliver_ >= end_) {
        return absl::OutOfRangeError(absl::StrCat("no batch after position ", end_ - 1));
      }
      position = next_deliver_;
    }
    absl::StatusOr<Batch> batch = ProduceHere(position);
    absl::MutexLock lock(&mu_);
    if (!batch.ok()) {
      failed_position_ = position;
      failure_ = batch.status();
      return failure_;
    }
    ++next_deliver_;
    return batch;
  }

  std::map<int64_t, Batch>::node_type node;
  {
    absl::MutexLock lock(&mu_);
    if (next_deliver_ >= end_) {
      return absl::OutOfRangeError(absl::StrCat("no batch after position ", end_ - 1));
    }
    mu_.Await(absl::Condition(this, &BatchPrefetcher::NextIsSettled));
    if (ready_.count(next_deliver_) == 0) return failure_;
    node = ready_.extract(next_deliver_);
    ++next_deliver_;
  }
  return std::move(node.mapped());
}

BatchPrefetcher::Producer EpochBatchProducer(const BatchLoader& loader,
                                             const DistributedSampler& sampler,
                                             int64_t batch_size,
                                             int64_t batches_per_epoch) {
  auto cache = std::make_shared<EpochIndexCache>(sampler);
  return [&loader, cache, batch_size,
          batches_per_epoch](int64_t position) -> absl::StatusOr<Batch> {
    if (batches_per_epoch <= 0 || position < 0) {
      return absl::OutOfRangeError(absl::StrCat("batch position ", position,
                                                " of an epoch of ", batches_per_epoch,
                                                " batches"));
    }
    const int64_t epoch = position / batches_per_epoch;
    const int64_t b = position % batches_per_epoch;
    const std::shared_ptr<const std::vector<int64_t>> indices = cache->Get(epoch);
    return loader.Load(*indices, b * batch_size, (b + 1) * batch_size, epoch);
  };
}

}  // namespace tessera::trainer
