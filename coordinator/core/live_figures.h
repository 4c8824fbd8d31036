// LiveFigures: the latest value of a few figures (common/device_figures.h:
// throughput, step time, device memory and utilisation) per rank of each
// active job, kept from the metric reports as they arrive so that /metrics
// reads them without touching the store. Bounded: only the named figures, and
// a job's are dropped when it is reaped.
//
// Thread-safety: safe from any thread; its mutex is a leaf (taken last, never
// while calling out).
#ifndef TESSERA_COORDINATOR_CORE_LIVE_FIGURES_H_
#define TESSERA_COORDINATOR_CORE_LIVE_FIGURES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store/store.h"

namespace tessera {

class LiveFigures {
 public:
  // Rank -> figure name -> latest value.
  using RankFigures = std::map<int32_t, std::map<std::string, double>>;

  // Whether `name` is one of the figures kept.
  static bool Kept(std::string_view name);

  // Keeps the latest (highest step) value of each kept figure in `rows`.
  // Rows of an older attempt than one already seen for the job are ignored;
  // a newer attempt replaces what the job had.
  void Record(const std::vector<MetricRow>& rows) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(int64_t job_id) ABSL_LOCKS_EXCLUDED(mu_);
  RankFigures Of(int64_t job_id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    int32_t attempt = 0;
    std::map<std::pair<int32_t, std::string>, std::pair<int64_t, double>>
        latest;  // (rank, name) -> (step, value)
  };
  mutable absl::Mutex mu_;
  std::map<int64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_LIVE_FIGURES_H_
