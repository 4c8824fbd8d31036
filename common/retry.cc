#include "common/retry.h"

#include <algorithm>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"

namespace tessera {

Backoff::Backoff(const RetryPolicy& policy, const Clock& clock, absl::BitGenRef random)
    : policy_(policy), clock_(clock) {
  if (policy_.jitter > 0) random_.emplace(random);
  Reset();
}

Backoff::Backoff(const RetryPolicy& policy, const Clock& clock)
    : policy_(policy), clock_(clock) {
  if (policy_.jitter > 0) random_.emplace(own_random_.emplace());
  Reset();
}

void Backoff::Reset() {
  start_ = clock_.Now();
  next_ = std::min(policy_.initial_delay, policy_.max_delay);
  attempts_ = 1;
}

std::optional<absl::Duration> Backoff::Next() {
  if (policy_.max_attempts > 0 && attempts_ >= policy_.max_attempts) return std::nullopt;
  const absl::Duration delay = Jittered(next_);
  if (clock_.Now() + delay > start_ + policy_.deadline) return std::nullopt;
  next_ = std::min(next_ * policy_.multiplier, policy_.max_delay);
  ++attempts_;
  return delay;
}

absl::Duration Backoff::Jittered(absl::Duration d) {
  if (!random_.has_value()) return d;
  const double jitter = std::min(policy_.jitter, 1.0);
  return d * (1.0 - jitter * absl::Uniform<double>(*random_, 0.0, 1.0));
}

namespace retry_internal {

absl::Status GaveUp(const absl::Status& last, int attempts, absl::Duration elapsed) {
  return absl::Status(last.code(),
                      absl::StrCat(last.message(), " (", attempts,
                                   attempts == 1 ? " attempt" : " attempts", " in ",
                                   absl::FormatDuration(elapsed), ")"));
}

}  // namespace retry_internal

}  // namespace tessera
