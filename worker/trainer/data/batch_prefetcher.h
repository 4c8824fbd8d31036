// Background batch preparation for the training loop: `workers` threads run a
// producer (gather, augment, normalise, resize, or on a GPU only gather:
// batch_loader.h) for the positions
// ahead of the consumer and hand the batches over in position order through a
// bounded queue, so the loop waits for data only when preparation falls behind.
//
// Usage: construct with a producer and the range of positions, call Next() once
// per batch. At most `queue_depth` batches are ready or in preparation beyond the
// last one delivered; workers block when the queue is full. The destructor stops
// the workers, drops prepared batches and joins the threads (a batch being
// prepared is finished first), so a loop that returns early never hangs. With
// workers = 0 Next() prepares each batch on the caller's thread.
//
// Next() must be called from one thread at a time; the producer is called from
// several worker threads at once and must be thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_BATCH_PREFETCHER_H_
#define TESSERA_WORKER_TRAINER_DATA_BATCH_PREFETCHER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/distributed_sampler.h"

namespace tessera::trainer {

struct BatchPrefetcherOptions {
  // Background threads preparing batches; 0: Next() prepares on its caller's thread.
  int workers = 2;
  // Batches ready or in preparation ahead of the consumer; 0: 2 * workers.
  int queue_depth = 0;
  // Runs first on each worker thread (a CUDA rank makes its device current
  // there, so pinned allocations never touch another GPU); empty: nothing.
  std::function<void()> on_worker_start;
};

class BatchPrefetcher {
 public:
  // Prepares the batch at `position`. Called concurrently from the workers, so it
  // must be thread-safe. Its error becomes Next()'s status at that position; a
  // LibTorch error it throws (c10::Error: the workers are the edge between
  // LibTorch and the trainer's statuses) becomes Internal.
  using Producer = std::function<absl::StatusOr<Batch>(int64_t position)>;

  // Delivers produce(first), produce(first + 1), ..., produce(first + count - 1).
  // Workers start at once.
  BatchPrefetcher(Producer produce, int64_t first, int64_t count,
                  const BatchPrefetcherOptions& options = {});
  ~BatchPrefetcher();

  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batch at the next position; blocks only while it is not ready.
  // OutOfRange after the last position; the producer's error, its message
  // prefixed with the position, when preparing this position failed (then
  // every later call fails alike).
  absl::StatusOr<Batch> Next();

  // The position the next call to Next() delivers.
  int64_t position() const;

 private:
  void WorkerLoop();
  // Conditions for mu_.Await.
  bool CanClaimOrMustExit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NextIsSettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Batch> ProduceHere(int64_t position);

  const Producer produce_;
  const int64_t end_;
  const int64_t depth_;

  mutable absl::Mutex mu_;
  int64_t next_claim_ ABSL_GUARDED_BY(mu_);    // next position for a worker to take
  int64_t next_deliver_ ABSL_GUARDED_BY(mu_);  // next position for Next()
  std::map<int64_t, Batch> ready_ ABSL_GUARDED_BY(mu_);
  // The lowest position whose preparation failed, and why.
  int64_t failed_position_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> workers_;  // Last: started once the state above exists.
};

// The producer of one rank's training stream: position p is batch
// b = p % batches_per_epoch of epoch e = p / batches_per_epoch, that is
// sampler.EpochIndices(e)[b * batch_size, (b + 1) * batch_size) loaded with
// epoch e's augmentation. A run resumed at optimizer step s (one batch per
// step) continues with first = s. The loader and the sampler are not owned and
// must outlive the producer; each epoch's indices are computed once and shared.
BatchPrefetcher::Producer EpochBatchProducer(const BatchLoader& loader,
                                             const DistributedSampler& sampler,
                                             int64_t batch_size,
                                             int64_t batches_per_epoch);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_BATCH_PREFETCHER_H_
