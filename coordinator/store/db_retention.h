// DbRetention: keeps the coordinator's database within its budget. Finished
// jobs' outputs are thinned by age and by size; job records (jobs, events,
// ranks) are never touched, nor the outputs of a job that is not finished.
//
// One pass (RunOnce):
//   1. By age, from the injected clock against each finished job's end:
//      past retain_metrics its metrics are downsampled to at most
//      max_points_per_series points per series, every evaluation point kept
//      (metric_downsampling.h); past retain_logs its logs are dropped (the
//      rank logs stay on the workers). Each is named once in the job's events.
//   2. By size: while the data takes more than max_size_bytes, the oldest
//      finished job's metrics and logs are dropped, then the next oldest's.
//   3. The freed pages are given back to the file system (incremental
//      vacuum and a WAL checkpoint).
// Start() runs a pass every Options::interval on a thread of its own until
// the destructor stops and joins it. It talks to the Store alone, never to
// the JobManager, so no manager lock is held while it does disk I/O; the
// store's deletes run in bounded transactions between the writer's commits.
//
// Thread-safety: RunOnce from one thread at a time (the loop's, or a test's
// when the loop is not started).
#ifndef TESSERA_COORDINATOR_STORE_DB_RETENTION_H_
#define TESSERA_COORDINATOR_STORE_DB_RETENTION_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/store/store.h"

namespace tessera {

class DbRetention {
 public:
  struct Options {
    // A finished job's metrics are downsampled this long after it ended
    // (--retain-metrics). InfiniteDuration: kept whole.
    absl::Duration retain_metrics = absl::Hours(24 * 90);
    // A finished job's logs are dropped this long after it ended
    // (--retain-logs). InfiniteDuration: kept.
    absl::Duration retain_logs = absl::Hours(24 * 30);
    // Budget for the database's data (--db-max-size): past it the oldest
    // finished jobs' metrics and logs are dropped. 0: none.
    int64_t max_size_bytes = 0;
    // Points a downsampled series keeps (evaluation series keep all).
    int max_points_per_series = 500;
    // Time between passes of the loop Start() runs.
    absl::Duration interval = absl::Minutes(10);
  };

  // What one pass did.
  struct Pass {
    int64_t jobs_downsampled = 0;
    int64_t metric_rows_downsampled = 0;  // removed by downsampling
    int64_t jobs_logs_dropped = 0;        // by age
    int64_t jobs_pruned = 0;              // by size: metrics and logs dropped
    int64_t rows_deleted = 0;             // every metric row and log chunk
    int64_t used_bytes_before = 0;
    int64_t used_bytes_after = 0;
    int64_t file_bytes_after = 0;
    bool over_budget = false;  // still over max_size_bytes: nothing left to prune
  };

  // `store` and `clock` are not owned and must outlive this.
  DbRetention(Store* store, const Clock* clock, Options options);
  // Stops the loop, if started, between two jobs of a pass, and joins it.
  ~DbRetention();

  DbRetention(const DbRetention&) = delete;
  DbRetention& operator=(const DbRetention&) = delete;

  // Whether the options ask for anything: a pass would otherwise do nothing.
  bool enabled() const;
  // One pass. A job whose step fails is skipped (logged) and tried again
  // next pass; the error of the first is returned after the others.
  absl::StatusOr<Pass> RunOnce();
  // Starts the loop; a pass every Options::interval, the first one interval
  // after the start. Call at most once.
  void Start();

 private:
  // Step 1 for one job; counts into `pass`.
  absl::Status ApplyAge(const FinishedJobOutputs& job, Pass& pass);
  // Step 2, over `jobs` oldest first.
  absl::Status PruneToBudget(const std::vector<FinishedJobOutputs>& jobs, Pass& pass);
  void Loop();

  Store* const store_;        // Not owned.
  const Clock* const clock_;  // Not owned.
  const Options options_;

  absl::Notification stop_;
  std::thread thread_;  // the loop; not joinable unless started
};

// "90d", "12h", "30m", "3600s", "2w"; "0", "off" or "never": infinite (keep
// forever). InvalidArgument names `flag`.
absl::StatusOr<absl::Duration> ParseRetentionAge(const std::string& text,
                                                 const std::string& flag);

// "90d" for 90 days, "12h", ...; "never" for an infinite duration.
std::string FormatRetentionAge(absl::Duration age);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_DB_RETENTION_H_
