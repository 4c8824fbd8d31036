// RankOutputs: what ranks produce while they run, apart from their exit: the
// log (stdout and stderr) that each rank's worker ships, and the metrics that
// each trainer reports. It checks their sizes, stores them, and reads them
// back for GetLogs and GetMetrics.
//
// It knows no job states. JobManager looks up what a call needs from its
// active jobs (whether the job is active, its current attempt, whether the rank
// has exited) and passes it in; a job that is not active is looked up in the
// store here.
//
// Thread-safety: safe from any thread. Its mutex guards only the set of logs
// shipped to their end; it is taken last (never while calling out) and never
// held across store I/O, so callers may hold their own locks.
#ifndef TESSERA_COORDINATOR_CORE_RANK_OUTPUTS_H_
#define TESSERA_COORDINATOR_CORE_RANK_OUTPUTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/change_notifier.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// What the JobManager knows about the rank whose log is read, when its job is
// active.
struct ActiveLog {
  int32_t attempt = 0;       // the attempt to read (the current one if none asked)
  bool rank_exited = false;  // that attempt's rank has exited
};

// What one job may store; past a limit, reports are ResourceExhausted.
struct RankOutputLimits {
  int64_t max_metric_rows = 0;  // 0: none
  int64_t max_log_bytes = 0;    // 0: none
  int max_metric_names = 0;     // 0: none
};

class RankOutputs {
 public:
  using Limits = RankOutputLimits;

  // `store`, `writer` and `changes` are not owned and must outlive this.
  // Reports of more than `max_points_per_report` metric points are refused.
  RankOutputs(Store* store, StoreWriter* writer, ChangeNotifier* changes,
              int max_points_per_report, Limits limits = {});

  RankOutputs(const RankOutputs&) = delete;
  RankOutputs& operator=(const RankOutputs&) = delete;

  // InvalidArgument for a log chunk larger than 4 MiB or at a negative offset.
  static absl::Status CheckChunk(const tessera::v1::ShipLogsRequest& request);
  // Stores a log chunk that passed CheckChunk, from a worker whose session
  // the caller checked. A chunk past the stored end is not stored (the reply's
  // next offset tells the worker where to resume). Below the database's
  // reserve the chunk is shed: counted per job, acknowledged, not stored.
  absl::StatusOr<tessera::v1::ShipLogsResponse> ShipLog(
      const tessera::v1::ShipLogsRequest& request);
  // Reads a rank's log. `active` is set when the job is active; otherwise the
  // job is looked up in the store (NotFound when there is none). The log is
  // complete once the rank is gone and either its worker shipped the end of
  // it or the job is no longer active (its worker may be gone for good).
  absl::StatusOr<tessera::v1::GetLogsResponse> ReadLog(
      const tessera::v1::GetLogsRequest& request, std::optional<ActiveLog> active);

  // The rows of a metrics report; InvalidArgument for too many points or a
  // bad metric name.
  absl::StatusOr<std::vector<MetricRow>> MetricRows(
      const tessera::v1::ReportMetricsRequest& request) const;
  // Counts the rows against their job's metric limits (rows and distinct
  // names); ResourceExhausted, naming the limit, when they would exceed one.
  absl::Status ChargeMetrics(int64_t job_id, const std::vector<MetricRow>& rows);
  // Forgets the counts of a job that is no longer active.
  void Forget(int64_t job_id);

  // Enqueues rows on the writer and calls `done` once they are durable (or
  // with the error). Call with the lock that orders the job's state changes
  // held, so the rows are ordered with them.
  void AppendMetrics(std::vector<MetricRow> rows, std::function<void(absl::Status)> done);
  // Reads a job's metrics. Unless `job_active`, NotFound for a job the store
  // does not have.
  absl::StatusOr<std::vector<tessera::v1::MetricPoint>> GetMetrics(
      const tessera::v1::GetMetricsRequest& request, bool job_active);

 private:
  // Whether the worker shipped the end of this rank's log.
  bool EofSeen(int64_t job_id, int32_t attempt, int32_t rank) const;
  // What a job has stored, counted against Limits.
  struct Tally {
    int64_t metric_rows = 0;
    std::set<std::string> metric_names;
    int64_t log_bytes = 0;
  };
  // Loads the job's tally from the store the first time it is needed.
  absl::Status LoadTally(int64_t job_id) ABSL_LOCKS_EXCLUDED(mu_);

  Store* const store_;             // Not owned.
  StoreWriter* const writer_;      // Not owned.
  ChangeNotifier* const changes_;  // Not owned.
  const int max_points_per_report_;
  const Limits limits_;

  mutable absl::Mutex mu_;
  // (job, attempt, rank) whose whole log has been shipped.
  std::set<std::tuple<int64_t, int32_t, int32_t>> logs_complete_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Tally> tallies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_RANK_OUTPUTS_H_
