#include "common/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>

namespace tessera {

ServiceNotifier::ServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = absl::Microseconds(static_cast<int64_t>(usec)) / 2;
  }
}

void ServiceNotifier::Send(const std::string& message) {
  if (enabled_) sd_notify(/*unset_environment=*/0, message.c_str());
}

void ServiceNotifier::Ready(const std::string& status) {
  Send("READY=1\nSTATUS=" + status);
}
void ServiceNotifier::Status(const std::string& status) { Send("STATUS=" + status); }
void ServiceNotifier::Stopping() { Send("STOPPING=1"); }
void ServiceNotifier::Watchdog() {
  if (watchdog_interval_ != absl::InfiniteDuration()) Send("WATCHDOG=1");
}

}  // namespace tessera
