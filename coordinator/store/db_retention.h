// DbRetention: keeps the coordinator's database within its budget. Finished
// jobs' outputs are thinned by age and by size; job records (jobs, events,
// ranks, and with them an eval job's result) are never touched, nor the
// outputs of a job that is not finished, nor, for the size budget, a kept
// metric's points (IsKeptMetric, common/metric_names.h: the evaluation
// results and every metric a sweep or search report reads), so that a report
// of jobs the budget thinned is the report it was. (Downsampling by age keeps
// every evaluation point, and each series' first and last.)
//
// One pass (RunOnce):
//   1. By age, from the injected clock against each finished job's end:
//      past retain_metrics its metrics are downsampled to at most
//      max_points_per_series points per series, every evaluation point kept
//      (metric_downsampling.h); past retain_logs its logs are dropped (the
//      rank logs stay on the workers). Each is named once in the job's events.
//   2. By size, thinning: while the data takes more than max_size_bytes, the
//      oldest finished job's metric series are cut to their last point (a
//      kept metric's are not), then the next oldest's.
//   3. By size, dropping: while still over, the oldest finished job's metrics
//      but the kept ones, and its logs, are dropped, then the next oldest's.
//      Still over after that, the pass says so: a warning in the log, and
//      bytes_over_budget (the coordinator's /metrics, and its alert).
//   4. The freed pages are given back to the file system (incremental
//      vacuum and a WAL checkpoint).
// Start() runs a pass every Options::interval on a thread of its own until
// the destructor stops and joins it. It talks to the Store alone, never to
// the JobManager, so no manager lock is held while it does disk I/O; the
// store's deletes run in bounded transactions between the writer's commits.
//
// Thread-safety: RunOnce from one thread at a time (the loop's, or a test's
// when the loop is not started); totals() from any thread.
#ifndef TESSERA_COORDINATOR_STORE_DB_RETENTION_H_
#define TESSERA_COORDINATOR_STORE_DB_RETENTION_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/store/metric_downsampling.h"
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
    // finished jobs' metrics are thinned, then dropped with their logs, the
    // kept metrics excepted. 0: none.
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
    int64_t jobs_thinned = 0;             // by size: series cut to their last point
    int64_t metric_rows_thinned = 0;
    int64_t jobs_pruned = 0;  // by size: all but the kept metrics, and logs, dropped
    int64_t metric_rows_pruned = 0;
    int64_t log_chunks_dropped = 0;  // by age and by size
    int64_t rows_deleted = 0;        // every metric row and log chunk
    int64_t used_bytes_before = 0;
    int64_t used_bytes_after = 0;
    int64_t file_bytes_after = 0;
    // Still over max_size_bytes after the size steps, and by how much: what
    // is left is job records, running jobs' outputs and kept metrics.
    bool over_budget = false;
    int64_t bytes_over_budget = 0;
  };

  // What the passes so far did, for the coordinator's /metrics.
  struct Totals {
    int64_t bytes_over_budget = 0;  // as the last pass left it
    int64_t metric_rows_downsampled = 0;
    int64_t metric_rows_thinned = 0;
    int64_t metric_rows_pruned = 0;
    int64_t log_chunks_dropped = 0;
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
  Totals totals() const;

 private:
  // Step 1 for one job; counts into `pass`.
  absl::Status ApplyAge(const FinishedJobOutputs& job, Pass& pass);
  // Step 2 (kThin) or 3 (kDrop), over `jobs` oldest first while over budget,
  // and each for one job.
  absl::Status CutToBudget(const std::vector<FinishedJobOutputs>& jobs, SizeCut cut,
                           Pass& pass);
  absl::Status ThinJob(const FinishedJobOutputs& job, Pass& pass);
  absl::Status PruneJob(const FinishedJobOutputs& job, Pass& pass);
  // After the size steps: how far over budget the data still is, logged.
  absl::Status NoteBudget(Pass& pass);
  void Loop();

  Store* const store_;        // Not owned.
  const Clock* const clock_;  // Not owned.
  const Options options_;

  mutable absl::Mutex mu_;
  Totals totals_ ABSL_GUARDED_BY(mu_);

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
