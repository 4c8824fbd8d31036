// The bounded decode pipeline of one rank: `workers` threads read the samples
// of a SampleStream, decode and transform them (transforms.h) straight into
// their slot of a uint8 batch, and the training loop takes whole batches in
// order with Next().
//
//   BatchPipelineOptions o;  o.batch_size = 64;  o.workers = 4;
//   o.transform.size = 224;  o.transform.seed = seed;  o.epoch = epoch;
//   ASSIGN_OR_RETURN(auto pipeline, BatchPipeline::Start(std::move(stream), o));
//   for (;;) {
//     absl::StatusOr<ImageBatch> batch = pipeline->Next();
//     if (absl::IsOutOfRange(batch.status())) break;  // end of the epoch
//     RETURN_IF_ERROR(batch.status());
//     // batch->pixels: uint8 [size, 3, S, S]; batch->labels: int64 [size]
//     pipeline->Recycle(*std::move(batch));  // optional: reuse its memory
//   }
//
// Memory bound: a batch's buffer is allocated when its first sample is
// claimed, and at most `prefetch_batches` batches are allocated and not yet
// handed out; with the workers' decode buffers (one image each) and, for tar
// shards, the stream's shuffle buffer, that is all a rank holds, whatever the
// dataset's size. A batch handed out by Next() belongs to the caller; given
// back with Recycle(), its buffers hold a later batch instead of a fresh
// allocation (10 MB at batch 64 and 224 px, which the kernel would otherwise
// zero and fault in again, page by page, for every batch). Recycled batches
// wait for reuse in a list of at most prefetch_batches + 1.
//
// Batches: the stream's samples in order, batch_size at a time; the last
// batch is short unless drop_last. Every rank's stream has the same length
// (global_sampler.h), so every rank makes the same number of batches.
//
// Bad samples: a sample that cannot be read or decoded is skipped, counted
// (skipped(), for the data_skipped metric) and named once through `log`. Its
// slot is filled with a copy of the next good sample of the same batch
// (wrapping to the batch's first), image and label, so batch sizes and the
// batch count never change. When the skips exceed max_skipped_fraction of the
// stream's samples, or every sample of a batch is bad, Next() returns DataLoss
// naming the first few skipped samples, and the workers stop.
//
// Thread safety: Next() is called by one thread; the counters from any. The
// destructor stops and joins the workers. `log` is called from the workers,
// one call at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_BATCH_PIPELINE_H_
#define TESSERA_WORKER_TRAINER_DATA_BATCH_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/data/sample_stream.h"
#include "worker/trainer/data/transforms.h"

namespace tessera::trainer::data {

struct ImageBatch {
  int64_t index = 0;  // of the batch in the epoch
  int64_t size = 0;   // images
  int image_size = 0;
  std::vector<uint8_t> pixels;  // uint8 [size, 3, image_size, image_size]
  std::vector<int64_t> labels;  // [size]
  int64_t replaced = 0;         // slots holding a copy of a good sample
};

struct BatchPipelineOptions {
  int batch_size = 64;         // per rank
  int workers = 2;             // decode threads (--data-workers)
  int prefetch_batches = 3;    // batches allocated ahead of the consumer, >= 1
  bool drop_last = false;      // leave out a short last batch
  TransformOptions transform;  // size, train/eval, seed
  int64_t epoch = 0;           // keys the augmentation draws
  // Skips beyond this fraction of the stream's samples fail the pipeline.
  double max_skipped_fraction = 0.01;
  // Names each skipped sample once ("skipped <name>: <reason>"); may be empty.
  std::function<void(const std::string&)> log;
};

class BatchPipeline {
 public:
  // InvalidArgument for a non-positive batch size, worker or prefetch count.
  static absl::StatusOr<std::unique_ptr<BatchPipeline>> Start(
      std::unique_ptr<SampleStream> stream, const BatchPipelineOptions& options);
  ~BatchPipeline();

  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch in order; OutOfRange after the last; DataLoss past the skip
  // threshold (see above).
  absl::StatusOr<ImageBatch> Next();
  // Takes back a batch the caller is done with; a later batch reuses its
  // buffers. At most prefetch_batches + 1 are kept (what a consumer that holds
  // one batch at a time needs); any thread may call it.
  void Recycle(ImageBatch batch);

  int64_t num_batches() const { return num_batches_; }
  // Samples skipped so far.
  int64_t skipped() const;
  // The most batch buffers ever allocated and not yet handed out (<= prefetch).
  int64_t peak_outstanding_batches() const;
  // Batch buffers allocated so far rather than taken from recycled batches.
  int64_t allocated_batches() const;

 private:
  struct Building {
    ImageBatch batch;
    int remaining = 0;      // samples not yet done
    std::vector<bool> bad;  // per slot
  };
  struct Claim {
    int64_t sample = 0;
    uint8_t* slot = nullptr;  // where its image goes
  };

  BatchPipeline(std::unique_ptr<SampleStream> stream,
                const BatchPipelineOptions& options);

  void WorkerLoop();
  // Waits for a sample that may be claimed; false when there is none left or
  // the pipeline stopped.
  bool ClaimNext(Claim& claim) ABSL_LOCKS_EXCLUDED(mu_);
  void Complete(const Claim& claim, int64_t label, const absl::Status& status,
                const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishBatch(Building& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::unique_ptr<SampleStream> stream_;
  const BatchPipelineOptions options_;
  const int64_t total_samples_;  // the samples that go into batches
  const int64_t num_batches_;
  const int64_t max_skipped_;
  const size_t image_bytes_;

  absl::Mutex read_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serialises a sequential stream
  absl::Mutex log_mu_;                             // one log call at a time
  mutable absl::Mutex mu_;
  std::map<int64_t, Building> building_ ABSL_GUARDED_BY(mu_);
  int64_t next_sample_ ABSL_GUARDED_BY(mu_) = 0;  // the next to claim
  int64_t next_batch_ ABSL_GUARDED_BY(mu_) = 0;   // the next to hand out
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ImageBatch> spare_ ABSL_GUARDED_BY(mu_);  // recycled, to reuse
  int64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> skipped_names_ ABSL_GUARDED_BY(mu_);  // the first few
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> workers_;  // last: started after everything above
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_BATCH_PIPELINE_H_
