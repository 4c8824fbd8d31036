// Clock: the source of time for logic classes, and of the waits of retry
// loops (common/retry.h), so tests can use a fake.
//
// Thread-safety: implementations are safe to call from any thread.
#ifndef TESSERA_COMMON_CLOCK_H_
#define TESSERA_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Blocks the calling thread for `d`; a fake clock moves on by `d` instead.
  virtual void SleepFor(absl::Duration d) = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
};

// A clock that only moves when told to: by Advance(), or by a sleep, which
// returns at once.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void SleepFor(absl::Duration d) override { Advance(d); }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COMMON_CLOCK_H_
