#include "coordinator/core/latency_histogram.h"

#include <algorithm>
#include <utility>

namespace tessera {

std::vector<double> LatencyHistogram::DefaultBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   120, 300,  600};
}

LatencyHistogram::LatencyHistogram(std::vector<double> bounds_seconds)
    : bounds_(bounds_seconds.empty() ? DefaultBounds() : std::move(bounds_seconds)),
      counts_(bounds_.size() + 1, 0) {}

void LatencyHistogram::Observe(absl::Duration d) {
  const double seconds = std::max(0.0, absl::ToDoubleSeconds(d));
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += seconds;
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  s.bounds_seconds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += counts_[i];
    s.cumulative.push_back(running);
  }
  s.count = running + counts_.back();
  s.sum_seconds = sum_;
  return s;
}

}  // namespace tessera
