#include "coordinator/api/task_pool.h"

#include <algorithm>
#include <utility>

namespace tessera {

TaskPool::TaskPool(int threads, int max_queued) : max_queued_(std::max(0, max_queued)) {
  threads = std::max(1, threads);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

TaskPool::~TaskPool() { Stop(); }

bool TaskPool::TrySubmit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  // A task waiting for a thread that is about to take it does not count
  // against the queue.
  if (static_cast<int>(queue_.size()) >= idle_ + max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void TaskPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool TaskPool::HasWorkOrStopping() const { return !queue_.empty() || stopping_; }

void TaskPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await(absl::Condition(this, &TaskPool::HasWorkOrStopping));
      --idle_;
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace tessera
