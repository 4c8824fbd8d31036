// ServiceNotifier: tells a service manager (systemd, Type=notify) that the
// daemon is ready, alive (watchdog) and stopping, through $NOTIFY_SOCKET.
// Without $NOTIFY_SOCKET every call is a no-op, so daemons run the same by hand.
//
// Thread-safety: safe from any thread.
#ifndef TESSERA_COMMON_SERVICE_NOTIFY_H_
#define TESSERA_COMMON_SERVICE_NOTIFY_H_

#include <string>

#include "absl/time/time.h"

namespace tessera {

class ServiceNotifier {
 public:
  // Reads $NOTIFY_SOCKET and $WATCHDOG_USEC once.
  ServiceNotifier();

  void Ready(const std::string& status);
  void Status(const std::string& status);
  void Stopping();
  // Pets the watchdog; call at least every watchdog_interval().
  void Watchdog();
  // How often to pet the watchdog: half the manager's timeout, or
  // InfiniteDuration when no watchdog is configured.
  absl::Duration watchdog_interval() const { return watchdog_interval_; }

 private:
  void Send(const std::string& message);
  bool enabled_ = false;
  absl::Duration watchdog_interval_ = absl::InfiniteDuration();
};

}  // namespace tessera

#endif  // TESSERA_COMMON_SERVICE_NOTIFY_H_
