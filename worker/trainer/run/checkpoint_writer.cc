#include "worker/trainer/run/checkpoint_writer.h"

#include <utility>

namespace tessera::trainer {

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

absl::Status CheckpointWriter::Start(Job job) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_) {
      return absl::FailedPreconditionError(
          "a checkpoint write is still in flight: Wait for it first");
    }
    busy_ = true;
    finished_ = false;
    status_ = absl::OkStatus();
  }
  if (thread_.joinable()) thread_.join();
  bytes_.store(0, std::memory_order_relaxed);
  thread_ = std::thread([this, job = std::move(job)] {
    absl::Status status =
        job([this](int64_t bytes) { bytes_.store(bytes, std::memory_order_relaxed); });
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
    finished_ = true;
  });
  return absl::OkStatus();
}

bool CheckpointWriter::busy() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

bool CheckpointWriter::done() const {
  absl::MutexLock lock(&mu_);
  return busy_ && finished_;
}

absl::Status CheckpointWriter::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (!busy_) return absl::OkStatus();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return status_;
}

}  // namespace tessera::trainer
