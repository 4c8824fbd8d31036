// ChangeNotifier: a version counter that live views wait on. The coordinator
// bumps it whenever something a dashboard shows may have changed (a job state,
// a metric, a log chunk, a heartbeat); each Server-Sent Events stream waits for
// the version to move, then recomputes its view and sends what differs.
//
// Thread-safety: safe from any thread. Notify() never blocks on waiters, so it
// may be called with other locks held.
#ifndef TESSERA_COORDINATOR_CORE_CHANGE_NOTIFIER_H_
#define TESSERA_COORDINATOR_CORE_CHANGE_NOTIFIER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

class ChangeNotifier {
 public:
  void Notify() {
    absl::MutexLock lock(&mu_);
    ++version_;
  }

  uint64_t version() const {
    absl::MutexLock lock(&mu_);
    return version_;
  }

  // Waits until the version differs from `seen`, `timeout` passes or Close() is
  // called, and returns the version then.
  uint64_t WaitForChange(uint64_t seen, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto moved = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return version_ != seen || closed_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
    return version_;
  }

  // Wakes every waiter for good: streams end when the server stops.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_CHANGE_NOTIFIER_H_
