// StoreWriter: the coordinator's single writer thread.
//
// Logic classes enqueue writes while holding their own lock, which fixes the
// order in which writes reach the store, and never wait for disk while holding
// it. The writer applies the writes in that order; consecutive metric batches
// are merged into one AppendMetrics transaction. A write may carry a completion
// callback, run on the writer thread after the write committed (or failed), so an
// RPC can be acknowledged only once its data is durable.
//
// When the store fails (disk full, I/O error), job-state writes are kept and
// retried in order with backoff, so no state change is lost; metric batches
// fail back to their senders with Unavailable, who retry. healthy() reports
// whether the last write went through, for the gRPC health service.
//
// The backlog while the store fails: a queued UpsertWorker is replaced by a
// newer one for the same worker (each heartbeat writes one), so it grows only
// with real state changes. Past Options::max_backlog queued writes, metric
// batches are refused at once with Unavailable (never acknowledged, so their
// senders retry); state writes are still kept, never dropped, and the
// crossing is logged. Failures are logged once per distinct error and then at
// most every 30 s, not once per write and retry.
//
// Thread-safety: all methods are safe from any thread. Callbacks must not call
// back into the StoreWriter's Flush().
#ifndef TESSERA_COORDINATOR_STORE_STORE_WRITER_H_
#define TESSERA_COORDINATOR_STORE_STORE_WRITER_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/store/store.h"

namespace tessera {

class StoreWriter {
 public:
  using Done = std::function<void(absl::Status)>;

  struct Options {
    // Queued writes past which metric batches are refused (Unavailable).
    size_t max_backlog = 10000;
    // Bytes kept free on the store's file system for state writes
    // (--db-reserve); below it metric batches are shed, and the store's
    // journal is kept under a quarter of it at every commit (LimitJournal),
    // so that the journal alone never takes the disk below it. 0: no reserve,
    // and on a full disk metric batches fail with Unavailable (senders retry).
    int64_t reserve_bytes = 0;
  };

  // What was shed of one job's outputs.
  struct Shed {
    int64_t metric_rows = 0;
    int64_t log_lines = 0;
  };

  // `store` is not owned and must outlive the writer.
  explicit StoreWriter(Store* store) : StoreWriter(store, Options()) {}
  StoreWriter(Store* store, Options options);
  // Applies everything still queued, then joins the thread.
  ~StoreWriter();

  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  void UpdateJob(JobRecord job, Done done = nullptr);
  void PutRanks(std::vector<RankRecord> ranks, Done done = nullptr);
  void UpsertWorker(WorkerRecord worker, Done done = nullptr);
  void AppendMetrics(std::vector<MetricRow> rows, Done done = nullptr);

  // Blocks until every write enqueued before the call has been applied, or
  // until `timeout` passes (the store may be failing); returns whether it was.
  bool Flush(absl::Duration timeout = absl::Seconds(5));

  // Number of writes that failed since start; the last failure is logged.
  int64_t failed_writes() const;
  // False from a failed write until the next successful one.
  bool healthy() const;
  // Writes queued or being applied (kept for retry while the store fails).
  size_t backlog() const;
  // Queued UpsertWorker writes replaced by a newer one for the same worker.
  int64_t coalesced_writes() const;

  // Whether the store's file system has less free space than the reserve,
  // checked at most every 250 ms; always false without a reserve. Logs when
  // it starts and stops.
  bool BelowReserve();
  // Whether the last check found the disk within a few reserves of full.
  bool NearReserve();
  // True from a shed metric batch or log chunk until the reserve is free
  // again (health: DEGRADED).
  bool shedding() const;
  // Counts log lines of a job shed by RankOutputs.
  void CountShedLog(int64_t job_id, int64_t lines);
  // What was shed of the job since the last call for it.
  Shed TakeShed(int64_t job_id);
  // Ids of the jobs with job or rank writes kept for retry or still queued:
  // their current state is not yet stored.
  std::set<int64_t> UnstoredJobs() const;

 private:
  struct Barrier {};
  using Payload = std::variant<JobRecord, std::vector<RankRecord>, WorkerRecord,
                               std::vector<MetricRow>, Barrier>;
  struct Op {
    Payload payload;
    Done done;
  };

  void Enqueue(Payload payload, Done done);
  // Keeps only the newest queued UpsertWorker per worker, at the place of the
  // oldest (a worker row depends on no other write); merges their callbacks.
  void CoalesceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs when the backlog crosses Options::max_backlog, and when it has
  // drained to half of it again.
  void NoteBacklogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();
  // Applies the batch; returns the state writes that must be retried, in order.
  std::vector<Op> Apply(std::vector<Op>& batch);
  // Apply's metric step: stores the rows, or sheds them below the reserve
  // (counted per job); the status for their senders.
  absl::Status StoreOrShedMetrics(const std::vector<MetricRow>& rows);
  void CountShedRows(const std::vector<MetricRow>& rows);
  // Adds the job a job or rank write is about to `ids`.
  static void AddJobIds(const Op& op, std::set<int64_t>& ids);
  // Logs a failed round: the first time, when the error changes, and then at
  // most every 30 s. Writer thread only.
  void LogFailure(const absl::Status& first, int64_t failures, size_t kept);

  Store* const store_;  // Not owned.
  const Options options_;

  // Writer thread only.
  std::string last_logged_error_;
  absl::Time last_logged_at_ = absl::InfinitePast();
  int64_t failed_rounds_ = 0;

  mutable absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // taken by the writer thread
  int64_t coalesced_ ABSL_GUARDED_BY(mu_) = 0;
  bool over_backlog_ ABSL_GUARDED_BY(mu_) = false;  // crossing logged
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t failed_writes_ ABSL_GUARDED_BY(mu_) = 0;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  absl::Time space_checked_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool below_reserve_ ABSL_GUARDED_BY(mu_) = false;
  // Free space under kJournalHeadroom reserves, as of the last check: the
  // journal is given back after every round then too, so that it cannot grow
  // into the reserve between two rounds (SQLite checkpoints only every 1,000
  // pages, more than a small disk's reserve).
  bool near_reserve_ ABSL_GUARDED_BY(mu_) = false;
  bool shedding_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, Shed> shed_ ABSL_GUARDED_BY(mu_);
  // Jobs whose writes the last round kept for retry.
  std::set<int64_t> kept_jobs_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // Last: starts after every other member exists.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_STORE_WRITER_H_
