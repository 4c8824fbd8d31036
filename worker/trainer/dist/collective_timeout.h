// The collective timeout: one thread per communicator that notices a
// collective which will never finish, so that a rank fails with a reason
// instead of hanging (or failing later with a message that names nothing).
//
// Every poll interval it calls the backend's `poll` (NCCL: ncclCommGetAsyncError,
// and retiring collectives whose `done` event completed) and ages the oldest
// pending collective of the backend's PendingCollectiveTracker. It fires once,
// and then stops, when the poll returns an error, or when that collective has
// been pending for `timeout` or longer. Firing calls `on_fire` with the reason,
// e.g. "collective timeout: allreduce #412 (bucket 3) pending for 300.0 s
// (limit 300.0 s)". The backend's handler aborts the communicator (pending and
// later collectives fail with the reason) and then calls the process's handler,
// which in tessera-train logs the reason and exits with kTrainerExitCollectiveFailure
// (ExitOnCollectiveFailure).
//
// The timeout (--collective-timeout, 5 minutes by default) is longer than the
// coordinator's stall threshold (60 s by default), so that the coordinator,
// which sees every rank and can name the one that stopped, acts first; the
// collective timeout is the rank's own last resort.
//
// Check() is one iteration without the thread; tests drive it with a
// FakeClock and a fake poll. Plain C++ (no LibTorch, no CUDA).
// Thread-safety: Start() and the destructor from the owning thread; `poll` and
// `on_fire` run on the collective timeout's thread (Check() on the caller's), and
// `on_fire` must not destroy the collective timeout. reason() from any thread.
#ifndef TESSERA_WORKER_TRAINER_DIST_COLLECTIVE_TIMEOUT_H_
#define TESSERA_WORKER_TRAINER_DIST_COLLECTIVE_TIMEOUT_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/trainer_exit.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace tessera::trainer {

// Ends tessera-train after the collective timeout fired: says why on stderr (with the
// "exit reason" line the worker passes on, common/trainer_exit.h), then exits
// at once with kTrainerExitCollectiveFailure (no destructors: a communicator's
// teardown could wait on the peer that is gone).
[[noreturn]] void ExitOnCollectiveFailure(const std::string& reason);

// The same for a CUDA error outside NCCL (NcclOptions::on_device_failure, or a
// training step that failed with one): exits with kTrainerExitCudaError.
[[noreturn]] void ExitOnCudaError(const std::string& reason);

// Whether a failure's message is a CUDA error's: LibTorch's read "CUDA error:
// ..." (an illegal address, a launch failure) or "CUDA out of memory"; the
// NCCL backend's name a cudaError. Such a rank exits with
// kTrainerExitCudaError, not as a runtime failure.
bool IsCudaErrorMessage(std::string_view message);

struct CollectiveTimeoutOptions {
  // A collective pending this long fires the collective timeout (--collective-timeout).
  absl::Duration timeout = absl::Minutes(5);
  // Real time between two checks.
  absl::Duration poll_interval = absl::Milliseconds(100);
};

class CollectiveTimeout {
 public:
  // The backend's asynchronous state: OK, or the error that broke the
  // communicator. It may also End() collectives that it finds finished.
  using Poll = std::function<absl::Status()>;
  // Told why the collective timeout fired; called at most once.
  using OnFire = std::function<void(const std::string& reason)>;

  // `tracker` and `clock` must outlive the collective timeout. A null `poll` counts as
  // always OK (Gloo reports errors only through the waiting call).
  CollectiveTimeout(const PendingCollectiveTracker& tracker, const Clock& clock,
                    Poll poll, OnFire on_fire, CollectiveTimeoutOptions options = {});

  // Stops the thread and joins it.
  ~CollectiveTimeout();

  CollectiveTimeout(const CollectiveTimeout&) = delete;
  CollectiveTimeout& operator=(const CollectiveTimeout&) = delete;

  // Starts the thread; its first check comes one poll interval later.
  void Start();

  // One check: polls, then ages the oldest pending collective. Returns the
  // reason to fire, or nullopt. Does not call on_fire.
  std::optional<std::string> Check();

  // Why the collective timeout fired; nullopt while it has not.
  std::optional<std::string> reason() const;

  const CollectiveTimeoutOptions& options() const { return options_; }

 private:
  void Loop();

  // Constant after construction.
  const PendingCollectiveTracker& tracker_;  // Not owned.
  const Clock& clock_;                       // Not owned.
  const Poll poll_;
  const OnFire on_fire_;
  const CollectiveTimeoutOptions options_;

  mutable absl::Mutex mu_;
  std::optional<std::string> reason_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread thread_;  // Last: runs Loop(), which uses everything above.
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_COLLECTIVE_TIMEOUT_H_
