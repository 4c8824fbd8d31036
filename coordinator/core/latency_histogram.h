// LatencyHistogram: how long something took, counted in fixed buckets, for the
// coordinator's /metrics page (Prometheus histograms). Observe() is cheap: one
// short lock and a binary search over the bounds.
//
// Thread-safety: safe from any thread.
#ifndef TESSERA_COORDINATOR_CORE_LATENCY_HISTOGRAM_H_
#define TESSERA_COORDINATOR_CORE_LATENCY_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class LatencyHistogram {
 public:
  // What was observed so far. `cumulative[i]` counts observations at most
  // `bounds_seconds[i]`; `count` counts all of them (the +Inf bucket).
  struct Snapshot {
    std::vector<double> bounds_seconds;
    std::vector<uint64_t> cumulative;
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  // `bounds_seconds` ascending; empty: DefaultBounds().
  explicit LatencyHistogram(std::vector<double> bounds_seconds = {});

  // 1 ms to 10 min, roughly x2.5 apart: a heartbeat handler and a slow
  // rendezvous both land in a bucket that tells something.
  static std::vector<double> DefaultBounds();

  void Observe(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  Snapshot Read() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, +Inf last
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Observes the wall time from its construction to its destruction.
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram& histogram)
      : histogram_(histogram), start_(absl::Now()) {}
  ~ScopedLatency() { histogram_.Observe(absl::Now() - start_); }
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  LatencyHistogram& histogram_;
  const absl::Time start_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_LATENCY_HISTOGRAM_H_
