// Retries with backoff: the one policy for every loop that waits longer after
// each failure.
//
// A RetryPolicy says how long to wait: the first delay, doubled after each
// failure up to a cap, each delay shortened by a random part of up to
// `jitter` of it (so that clients failing together do not retry together), and
// when to give up (a deadline, a number of attempts, or never). A Backoff walks
// that schedule for a loop that waits in its own way (on a condition variable,
// until a due time); Retry() is the whole loop around a call that returns
// absl::Status or absl::StatusOr<T>, sleeping through the Clock so that a test's
// FakeClock takes the waits at once. The random source for the jitter can be
// injected too, for tests that check the delays.
//
//   RealClock clock;
//   absl::StatusOr<Reply> reply = Retry(
//       {.initial_delay = absl::Milliseconds(200), .max_delay = absl::Seconds(5),
//        .deadline = absl::Seconds(60)},
//       clock, [&] { return client.Call(request); });
//
// Thread-safety: a Backoff belongs to one loop (callers synchronise it);
// Retry() keeps its state on the calling thread's stack.
#ifndef TESSERA_COMMON_RETRY_H_
#define TESSERA_COMMON_RETRY_H_

#include <functional>
#include <optional>
#include <type_traits>

#include "absl/random/bit_gen_ref.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tessera {

struct RetryPolicy {
  // The delay after the first failure.
  absl::Duration initial_delay = absl::Milliseconds(100);
  // Each delay is the previous one times this, up to max_delay.
  double multiplier = 2.0;
  absl::Duration max_delay = absl::Seconds(10);
  // Each delay is drawn from [d * (1 - jitter), d] for the schedule's d, so that
  // jitter never makes a wait longer than the schedule; 0 keeps the schedule.
  double jitter = 0.2;
  // Give up when the next attempt would start later than this after the first
  // one (infinite: never).
  absl::Duration deadline = absl::InfiniteDuration();
  // Give up after this many attempts (0: no limit).
  int max_attempts = 0;
  // Retry() only: which errors are worth another attempt.
  bool (*retryable)(const absl::Status&) = absl::IsUnavailable;
};

// The delays of a RetryPolicy, one failure at a time. The deadline counts from
// construction or the last Reset().
class Backoff {
 public:
  // `clock` (for the deadline) and `random` (for the jitter) must outlive it.
  Backoff(const RetryPolicy& policy, const Clock& clock, absl::BitGenRef random);
  // Draws the jitter from a generator of its own (made only when jitter > 0).
  Backoff(const RetryPolicy& policy, const Clock& clock);
  Backoff(const Backoff&) = delete;
  Backoff& operator=(const Backoff&) = delete;

  // The wait before the next attempt, or nullopt to give up: the attempts are
  // spent, or that attempt would start past the deadline. Never nullopt for a
  // policy with neither a deadline nor max_attempts.
  std::optional<absl::Duration> Next();
  // After a success: the first delay again, the deadline counted from now.
  void Reset();
  // Attempts so far: the first one, and one more for each delay Next() gave.
  int attempts() const { return attempts_; }

 private:
  absl::Duration Jittered(absl::Duration d);

  const RetryPolicy policy_;
  const Clock& clock_;
  std::optional<absl::BitGen> own_random_;
  std::optional<absl::BitGenRef> random_;  // null when the policy has no jitter
  absl::Time start_;
  absl::Duration next_;  // the schedule's next delay, before jitter
  int attempts_ = 1;
};

// Called before each wait of Retry(): the error, the number of the attempt
// that failed (from 1) and the wait before the next one.
using RetryObserver = std::function<void(const absl::Status&, int, absl::Duration)>;

namespace retry_internal {

inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

// `last` with the attempts and the time they took added to its message.
absl::Status GaveUp(const absl::Status& last, int attempts, absl::Duration elapsed);

// Retry()'s loop, over a Backoff made for `policy`.
template <typename Fn>
std::invoke_result_t<Fn&> RetryWith(Backoff& backoff, const RetryPolicy& policy,
                                    Clock& clock, Fn& fn, const RetryObserver& on_retry) {
  using Result = std::invoke_result_t<Fn&>;
  const absl::Time start = clock.Now();
  while (true) {
    Result result = fn();
    const absl::Status& status = StatusOf(result);
    if (status.ok() || !policy.retryable(status)) return result;
    const int attempt = backoff.attempts();
    const std::optional<absl::Duration> delay = backoff.Next();
    if (!delay.has_value()) return Result(GaveUp(status, attempt, clock.Now() - start));
    if (on_retry) on_retry(status, attempt, *delay);
    clock.SleepFor(*delay);
  }
}

}  // namespace retry_internal

// Calls `fn` until it succeeds, fails with an error that policy.retryable
// rejects (returned as it is), or the policy gives up: then the last error
// comes back, its message naming the attempts ("... (5 attempts in 3.1s)").
// The waits go through `clock`, the jitter comes from `random`.
template <typename Fn>
std::invoke_result_t<Fn&> Retry(const RetryPolicy& policy, Clock& clock,
                                absl::BitGenRef random, Fn&& fn,
                                const RetryObserver& on_retry = nullptr) {
  Backoff backoff(policy, clock, random);
  return retry_internal::RetryWith(backoff, policy, clock, fn, on_retry);
}

// As above, with jitter from a generator of the Backoff's own.
template <typename Fn>
std::invoke_result_t<Fn&> Retry(const RetryPolicy& policy, Clock& clock, Fn&& fn,
                                const RetryObserver& on_retry = nullptr) {
  Backoff backoff(policy, clock);
  return retry_internal::RetryWith(backoff, policy, clock, fn, on_retry);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_RETRY_H_
