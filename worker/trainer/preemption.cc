#include "worker/trainer/preemption.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

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

}  // namespace

std::atomic<bool>& PreemptionRequested() { return preemption_requested; }

absl::Status InstallPreemptionHandler() {
  struct sigaction action {};
  action.sa_handler = OnPreemptionSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &action, nullptr) != 0) {
    return absl::InternalError(
        absl::StrCat("installing the SIGUSR1 handler: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace tessera::trainer
