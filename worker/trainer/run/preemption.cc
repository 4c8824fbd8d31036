#include "worker/trainer/run/preemption.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {
namespace {

// Constant-initialised, so the handler never runs a constructor.
std::atomic<bool> preemption_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free,
              "the SIGUSR1 handler may only touch a lock-free atomic");

extern "C" void OnPreemptionSignal(int /*signal*/) {
  preemption_requested.store(true, std::memory_order_relaxed);
}

absl::Status ErrnoError(const char* what, int error) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace

std::atomic<bool>& PreemptionRequested() { return preemption_requested; }

absl::StatusOr<std::unique_ptr<PreemptionListener>> PreemptionListener::Start() {
  struct sigaction action {};
  action.sa_handler = OnPreemptionSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &action, nullptr) != 0) {
    return ErrnoError("installing the SIGUSR1 handler", errno);
  }
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  if (const int error = pthread_sigmask(SIG_BLOCK, &usr1, nullptr); error != 0) {
    return ErrnoError("blocking SIGUSR1", error);
  }
  std::unique_ptr<PreemptionListener> listener(new PreemptionListener());
  listener->thread_ = std::thread([raw = listener.get()] { raw->Loop(); });
  return listener;
}

PreemptionListener::~PreemptionListener() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void PreemptionListener::Loop() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  const timespec poll = absl::ToTimespec(kPollInterval);
  while (!stop_.load()) {
    if (sigtimedwait(&usr1, nullptr, &poll) == SIGUSR1) {
      preemption_requested.store(true, std::memory_order_relaxed);
    }
  }
}

}  // namespace tessera::trainer
