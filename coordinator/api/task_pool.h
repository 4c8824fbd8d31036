// TaskPool: a fixed set of threads that run tasks from a bounded queue.
// TrySubmit refuses a task when every thread is busy and the queue is full,
// so that a burst of requests is answered "busy" at once instead of piling up
// without bound (HttpServer answers 503).
//
// Thread-safety: TrySubmit from any thread. The destructor stops taking
// tasks, runs the ones already queued and joins the threads.
#ifndef TESSERA_COORDINATOR_API_TASK_POOL_H_
#define TESSERA_COORDINATOR_API_TASK_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

class TaskPool {
 public:
  // `threads` >= 1 run tasks; at most `max_queued` (>= 0) wait for a thread.
  TaskPool(int threads, int max_queued);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task`; false (and `task` is dropped) when it cannot be queued:
  // the queue is full or the pool is stopping.
  bool TrySubmit(std::function<void()> task);

  // Stops taking tasks and waits for the running and queued ones. Idempotent.
  void Stop();

 private:
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads waiting for a task
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_TASK_POOL_H_
