// Writes a checkpoint's files on a background thread, so that the training
// loop goes on while a large model and its optimizer state reach the disk
// (trainer.cc: the loop snapshots the state into host memory at the step
// boundary; checkpoint_publisher.h hands the bytes here, and publishes
// `latest` only once every rank reports its part durable).
//
//   CheckpointWriter writer;
//   RETURN_IF_ERROR(writer.Start([files = std::move(files)](const WriteProgress& p) {
//     return WriteCheckpointFiles(files, p);
//   }));
//   ... training steps; writer.done() and writer.bytes_written() meanwhile ...
//   RETURN_IF_ERROR(writer.Wait());  // the write's status
//
// One write at a time. Plain C++ (no LibTorch).
// Thread-safety: Start and Wait from one thread (the training thread);
// done(), busy() and bytes_written() from any thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_WRITER_H_
#define TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_WRITER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessera::trainer {

class CheckpointWriter {
 public:
  // Told the bytes written so far, on the writing thread.
  using Progress = std::function<void(int64_t bytes)>;
  // The write: returns its status; reports progress as it goes.
  using Job = std::function<absl::Status(const Progress& progress)>;

  CheckpointWriter() = default;
  // Waits for a write in flight (its status is dropped: call Wait first).
  ~CheckpointWriter();

  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Starts `job` on a thread of its own. FailedPrecondition while another
  // write has not been collected by Wait.
  absl::Status Start(Job job);

  // A write was started and Wait has not collected it yet.
  bool busy() const;
  // The write started last has finished (well or not); false when none.
  bool done() const;
  // Bytes the write in flight (or the last one) reported.
  int64_t bytes_written() const { return bytes_.load(std::memory_order_relaxed); }

  // Blocks until the write in flight finishes and returns its status (OK when
  // there is none); the writer is then free for the next one.
  absl::Status Wait();

 private:
  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> bytes_{0};
  std::thread thread_;  // touched by Start, Wait and the destructor only
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_WRITER_H_
