// Publishes the trainer's metrics: each report (several named values at one
// optimizer step) becomes a human progress line on stdout, JSON lines in an
// optional metrics file, and points queued for the coordinator.
//
// Delivery to the coordinator never blocks or fails training: a background sender
// thread takes batches from the queue and calls CoordinatorClient::ReportMetrics.
// When a call fails the batch goes back to the front of the queue and the sender
// backs off exponentially; beyond max_buffered_points the oldest points are
// dropped and counted. Failures are logged to stderr once per outage.
//
// Thread-safety: Report, Flush and dropped_points may be called from one thread at
// a time (the training loop); the sender thread is internal and joined by the
// destructor.
#ifndef TESSERA_WORKER_TRAINER_RUN_METRICS_REPORTER_H_
#define TESSERA_WORKER_TRAINER_RUN_METRICS_REPORTER_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/retry.h"
#include "worker/trainer/run/coordinator_client.h"

namespace tessera::trainer {

struct MetricsReporterOptions {
  int rank = 0;                          // written into progress and file lines
  std::string metrics_file;              // JSON lines, truncated at start; empty: none
  std::ostream* progress = nullptr;      // human progress lines; null: none. Not owned.
  int64_t max_buffered_points = 100000;  // oldest dropped beyond this
  int64_t max_batch_points = 1000;       // points per ReportMetrics call
  absl::Duration flush_interval = absl::Seconds(2);          // send cadence when healthy
  absl::Duration initial_backoff = absl::Milliseconds(500);  // after a failure
  absl::Duration max_backoff = absl::Seconds(30);
};

class MetricsReporter {
 public:
  // `coordinator` may be null (standalone runs); otherwise it must outlive the
  // reporter. Fails when the metrics file cannot be created.
  static absl::StatusOr<std::unique_ptr<MetricsReporter>> Create(
      MetricsReporterOptions options, CoordinatorClient* coordinator);

  ~MetricsReporter();
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

  // Publishes `values` (name, value) measured at optimizer step `step`.
  void Report(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  // Waits until every queued point has reached the coordinator, retrying failed
  // batches without the usual backoff wait, for at most `timeout`.
  // DeadlineExceeded (with the number of points left) when time runs out.
  absl::Status Flush(absl::Duration timeout);

  // Points discarded because the queue was full.
  int64_t dropped_points() const;

 private:
  MetricsReporter(MetricsReporterOptions options, CoordinatorClient* coordinator,
                  std::FILE* file);

  void SenderLoop();
  // When the sender should next send; InfiniteFuture when nothing is due.
  absl::Time NextSendTimeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const MetricsReporterOptions options_;
  CoordinatorClient* const coordinator_;  // Not owned; may be null.
  std::FILE* const file_;                 // Owned; used only by Report's caller.
  RealClock clock_;

  mutable absl::Mutex mu_;
  std::deque<MetricSample> pending_ ABSL_GUARDED_BY(mu_);
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int flush_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_send_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The wait after a failed send: jittered, never giving up.
  Backoff backoff_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // The coordinator refused a report for the job's metric limit: nothing more
  // is sent.
  bool limit_reached_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar changed_;

  std::thread sender_;  // Runs SenderLoop when there is a coordinator.
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_METRICS_REPORTER_H_
