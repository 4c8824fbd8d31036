// Store: the coordinator's durable state. The only interface through which the
// coordinator touches SQL; SqliteStore (sqlite_store.h) is the implementation,
// and ":memory:" gives a private in-memory database for tests.
//
// Records are plain structs. Job specs are kept as serialized tessera.v1.JobSpec
// plus the YAML text as submitted.
//
// Thread-safety: implementations are safe to call from any thread; each call is
// atomic (one transaction).
#ifndef TESSERA_COORDINATOR_STORE_STORE_H_
#define TESSERA_COORDINATOR_STORE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_state.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

struct JobRecord {
  int64_t id = 0;  // assigned by CreateJob
  std::string name;
  tessera::v1::JobState state = tessera::v1::JOB_STATE_QUEUED;
  std::string reason;
  std::string pending_reason;
  int32_t attempt = 0;
  tessera::v1::JobSpec spec;
  std::string spec_yaml;
  std::string client_request_id;  // empty when the client sent none
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  int64_t sweep_id = 0;     // the sweep this job is a point of; 0: none
  int32_t sweep_point = 0;  // the point's index in that sweep
  // Name of the user token that submitted it (for a sweep point: the sweep's);
  // empty when submitted without authentication. Set by CreateJob only.
  std::string owner;
  // Attempts ended by a drain or preemption, or resumed because a restarted
  // coordinator lost a rank's result; they do not count as restarts.
  int32_t preemptions = 0;
  // Metric rows and log lines shed (acknowledged, not stored) while the
  // database's disk was below its reserve (StoreWriter::Options::reserve_bytes).
  int64_t metrics_not_stored = 0;
  int64_t log_lines_not_stored = 0;
  // UpdateJob only: when set, the event recorded for this update, also
  // without a state change (e.g. a straggler flagged); not stored in the row.
  std::string event;
};

// Which jobs ListJobs returns.
struct JobFilter {
  tessera::v1::JobState state = tessera::v1::JOB_STATE_UNSPECIFIED;  // any
  int64_t sweep_id = 0;                                              // 0: any
  int32_t limit = 0;  // newest first; 0: all
  // Only jobs submitted by this user (empty: anyone's).
  std::string owner;
  // Paging: only jobs with an id below this (0: from the newest).
  int64_t before_id = 0;
};

// A scaling study: its spec; the points are jobs whose sweep_id names it.
struct SweepRecord {
  int64_t id = 0;  // assigned by CreateSweep
  std::string name;
  tessera::v1::SweepState state = tessera::v1::SWEEP_STATE_RUNNING;
  std::string reason;
  tessera::v1::SweepSpec spec;
  std::string spec_yaml;
  std::string client_request_id;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  std::string owner;  // as JobRecord::owner; set by CreateSweep only
};

// A hyperparameter search (coordinator/core/search_manager.h): its spec; its
// trials' jobs are SearchJobRecords.
struct SearchRecord {
  int64_t id = 0;  // assigned by CreateSearch
  std::string name;
  tessera::v1::SearchState state = tessera::v1::SEARCH_STATE_RUNNING;
  std::string reason;
  tessera::v1::SearchSpec spec;
  std::string spec_yaml;
  std::string client_request_id;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  std::string owner;  // as JobRecord::owner; set by CreateSearch only
};

// One job of a search: trial `trial` trained to the end of rung `rung`. It is
// written before the job is submitted (job_id 0), so that a restarted
// coordinator submits that job again under the same request id rather than
// deciding anew, and written again once the job has ended, with its outcome,
// which the search keeps even when retention drops the job's metrics.
struct SearchJobRecord {
  enum class Outcome {
    kRunning,  // not ended (or not yet submitted)
    kDone,     // ended with the rung's metric
    kFailed,   // ended without it: failed, cancelled, or no metric reported
  };
  int64_t search_id = 0;
  int32_t trial = 0;
  int32_t rung = 0;
  int64_t job_id = 0;  // 0: decided, not yet submitted
  Outcome outcome = Outcome::kRunning;
  // Once ended: the job's final state (UNSPECIFIED for a job never submitted).
  tessera::v1::JobState job_state = tessera::v1::JOB_STATE_UNSPECIFIED;
  std::optional<double> metric;  // kDone: the job's last value of the metric
  int64_t steps = 0;             // the step of that value
  std::string reason;            // kFailed: why
  int64_t updated_unix_ms = 0;
};

// A credential for the coordinator's APIs. Only a hash of its secret is kept.
struct TokenRecord {
  int64_t id = 0;  // assigned by CreateToken; part of the token text
  std::string
      kind;  // "user" (tessctl, web API) | "join" (workers) | "metrics" (/metrics)
  std::string name;  // who it is for, e.g. "alice" or "rack-3"
  std::string hash;  // SHA-256 of the token's secret
  int64_t created_unix_ms = 0;
  bool revoked = false;
  // A user token that sees and acts on every user's jobs and sweeps.
  bool admin = false;
};

// One user's fair-share usage (slot-seconds) as of a time.
struct UsageRecord {
  std::string user;
  double slot_seconds = 0;
  int64_t updated_unix_ms = 0;
};

// What one job has stored: for its per-job limits.
struct JobOutputUsage {
  int64_t metric_rows = 0;
  std::vector<std::string> metric_names;  // distinct
  int64_t log_bytes = 0;
};

// A worker's own credential, issued when it registers with the join token and
// bound to its name. Only a hash of its secret is kept.
struct WorkerCredentialRecord {
  std::string worker;  // the worker's name; primary key
  std::string hash;    // SHA-256 of the credential's secret
  int64_t issued_unix_ms = 0;
};

// An allocation the coordinator submitted to a Slurm pool
// (coordinator/core/slurm/slurm_pool_manager.h), kept from its submission
// until the coordinator has seen it end and revoked its join credential, so
// that a restarted coordinator finds the allocations it left behind.
struct SlurmAllocationRecord {
  std::string slurm_job_id;  // primary key, as Slurm prints it ("1234")
  std::string pool;
  int64_t job_id = 0;        // the tessera job it was submitted for
  std::string owner;         // that job's owner
  std::string submitted_as;  // the account sbatch ran as; empty: the service's
  int32_t nodes = 0;
  // Slurm's compact state when last seen ("PD", "R", "CG", ...).
  std::string state;
  bool cancel_sent = false;
  // Its workers' join credential: the file and the token's id; both empty
  // once it is revoked.
  std::string credential_path;
  int64_t credential_id = 0;
  int64_t submitted_unix_ms = 0;
  int64_t running_since_unix_ms = 0;  // 0: not seen running
};

struct WorkerRecord {
  std::string name;  // primary key
  std::string hostname;
  int32_t slots = 0;
  std::string device_kind;  // "cpu" | "cuda"
  int64_t epoch = 0;
  int64_t last_seen_unix_ms = 0;
  std::string pool;          // worker pool label (e.g. a Slurm pool); empty: static
  std::string slurm_job_id;  // the Slurm allocation it runs in, if any
  // The GPUs it owns (RegisterWorkerRequest.gpu_ids); empty on a CPU worker.
  std::vector<std::string> gpu_ids;
  // An admin's drain, kept across coordinator restarts: its reason (empty:
  // not drained by an admin) and when what still runs there is stopped
  // (0: never).
  std::string admin_drain;
  int64_t admin_drain_deadline_unix_ms = 0;
};

// One rank of one attempt of a job.
struct RankRecord {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string worker;
  int32_t slot = 0;
  RankState state = RankState::kAssigned;
  int32_t pid = 0;
  int32_t exit_code = 0;
  int32_t signal = 0;
  bool has_result = false;
  std::string param_hash;
  double test_accuracy = 0;
  double test_loss = 0;
  std::string exit_reason;  // why the rank ended, e.g. "worker w1 declared dead"
  // An eval job's result (tessera.v1.EvalResult, serialized); empty: none.
  std::string eval_result;
};

// A piece of one rank's output (stdout and stderr interleaved), at a byte offset.
struct LogChunk {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  int64_t offset = 0;
  std::string data;
};

struct MetricRow {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  int64_t step = 0;
  std::string name;
  double value = 0;
  int64_t unix_ms = 0;
};

// One stored state transition of a job. The event written when the job is
// created has from_state JOB_STATE_UNSPECIFIED.
struct JobEvent {
  int64_t job_id = 0;
  int64_t unix_ms = 0;
  tessera::v1::JobState from_state = tessera::v1::JOB_STATE_UNSPECIFIED;
  tessera::v1::JobState to_state = tessera::v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
};

// The file system that holds the store; -1: unknown (an in-memory store).
struct DiskSpace {
  int64_t free_bytes = -1;   // available to the coordinator
  int64_t total_bytes = -1;  // the file system's size
};

// A finished job's outputs as database retention (db_retention.h) sees them.
struct FinishedJobOutputs {
  int64_t job_id = 0;
  tessera::v1::JobState state = tessera::v1::JOB_STATE_UNSPECIFIED;  // terminal
  int64_t ended_unix_ms = 0;  // the job's updated_unix_ms: when it ended
  bool metrics_downsampled = false;
  bool metrics_thinned = false;
  bool metrics_dropped = false;  // all but the kept metrics (IsKeptMetric)
  bool logs_dropped = false;
};

// What a retention step records: when, and an event for the job's events
// (empty: none), e.g. "logs dropped after 30d (--retain-logs)".
struct RetentionNote {
  int64_t unix_ms = 0;
  std::string event;
};

// The store's size, as SQLite counts it in pages.
struct StoreSize {
  int64_t file_bytes = 0;  // the database's pages, free ones included
  int64_t free_bytes = 0;  // pages on the free list, given back by ReclaimSpace
  int64_t wal_bytes = 0;   // the write-ahead log beside the file (0: none)
  // What the data takes: file_bytes - free_bytes.
  int64_t used_bytes() const { return file_bytes - free_bytes; }
};

// What `tessera-coordinator db stats` prints.
struct StoreStats {
  struct Table {
    std::string name;
    int64_t rows = 0;
    int64_t bytes = -1;  // its pages and its indexes' pages; -1: unknown
  };
  StoreSize size;
  std::string auto_vacuum;    // "none", "full" or "incremental"
  std::vector<Table> tables;  // largest first
  // The oldest job whose record, metrics or logs are kept (0: none), and
  // when it was submitted.
  int64_t oldest_job = 0;
  int64_t oldest_job_unix_ms = 0;
  int64_t oldest_metrics_job = 0;
  int64_t oldest_metrics_unix_ms = 0;  // its oldest kept metric point
  int64_t oldest_logs_job = 0;
  int64_t oldest_logs_unix_ms = 0;  // that job's submission
  // Finished jobs retention has thinned so far.
  int64_t jobs_metrics_downsampled = 0;
  int64_t jobs_metrics_thinned = 0;
  int64_t jobs_metrics_dropped = 0;
  int64_t jobs_logs_dropped = 0;
};

struct MetricQuery {
  int64_t job_id = 0;
  int64_t after_step = -1;  // rows with step > after_step
  std::string name;         // empty: any name
  int32_t limit = 10000;    // at most this many rows, ordered by (step, rank, name)
};

class Store {
 public:
  virtual ~Store() = default;

  // Stores a new job and returns its id. If `job.client_request_id` is non-empty
  // and a job with that request id exists, returns the existing job's id instead
  // and stores nothing.
  virtual absl::StatusOr<int64_t> CreateJob(const JobRecord& job) = 0;
  // NotFound if no such job.
  virtual absl::StatusOr<JobRecord> GetJob(int64_t id) = 0;
  // Jobs that pass the filter, newest first.
  virtual absl::StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) = 0;
  // All jobs, newest first.
  absl::StatusOr<std::vector<JobRecord>> ListJobs() { return ListJobs(JobFilter()); }
  // Non-terminal jobs (QUEUED, SCHEDULED, RUNNING), oldest first.
  virtual absl::StatusOr<std::vector<JobRecord>> ListActiveJobs() = 0;
  // Replaces the mutable fields (state, reason, pending_reason, attempt,
  // updated_unix_ms, preemptions, metrics_not_stored, log_lines_not_stored)
  // of an existing job; when the state changes,
  // or `event` is set, also appends a row to the events table (its reason:
  // `event` when set, else `reason`). NotFound if no such job.
  virtual absl::Status UpdateJob(const JobRecord& job) = 0;
  // The job's state transitions, oldest first, starting with the one recorded
  // by CreateJob (time created_unix_ms, reason job.reason); UpdateJob records
  // its updated_unix_ms and reason. NotFound if no such job.
  virtual absl::StatusOr<std::vector<JobEvent>> ListEvents(int64_t job_id) = 0;

  // Inserts or replaces the worker with this name.
  virtual absl::Status UpsertWorker(const WorkerRecord& worker) = 0;
  virtual absl::StatusOr<std::vector<WorkerRecord>> ListWorkers() = 0;
  // Inserts or replaces the credential of the worker it names; durable when
  // it returns.
  virtual absl::Status PutWorkerCredential(const WorkerCredentialRecord& credential) = 0;
  virtual absl::StatusOr<std::vector<WorkerCredentialRecord>> ListWorkerCredentials() = 0;

  // Inserts or replaces ranks, keyed by (job_id, attempt, rank).
  virtual absl::Status PutRanks(const std::vector<RankRecord>& ranks) = 0;
  // Ranks of one attempt ordered by rank.
  virtual absl::StatusOr<std::vector<RankRecord>> GetRanks(int64_t job_id,
                                                           int32_t attempt) = 0;

  // Appends a rank's log bytes at `chunk.offset`. Bytes already stored (a
  // retried chunk) are skipped; FailedPrecondition if the chunk starts past the
  // stored end, which would leave a gap.
  virtual absl::Status AppendLog(const LogChunk& chunk) = 0;
  // The stored length of a rank's log (0 when none).
  virtual absl::StatusOr<int64_t> LogEnd(int64_t job_id, int32_t attempt,
                                         int32_t rank) = 0;
  // Up to `max_bytes` of a rank's log starting at `from_offset`.
  virtual absl::StatusOr<std::string> ReadLog(int64_t job_id, int32_t attempt,
                                              int32_t rank, int64_t from_offset,
                                              int64_t max_bytes) = 0;

  // Appends metric rows in one transaction. Rows with a (job, attempt, rank,
  // step, name) key already stored are ignored, so a retried report never
  // duplicates a point.
  virtual absl::Status AppendMetrics(const std::vector<MetricRow>& rows) = 0;
  virtual absl::StatusOr<std::vector<MetricRow>> QueryMetrics(
      const MetricQuery& query) = 0;

  // Stores a new sweep and returns its id; like CreateJob, a repeated non-empty
  // client_request_id returns the existing sweep's id and stores nothing.
  virtual absl::StatusOr<int64_t> CreateSweep(const SweepRecord& sweep) = 0;
  // NotFound if no such sweep.
  virtual absl::StatusOr<SweepRecord> GetSweep(int64_t id) = 0;
  // All sweeps, newest first.
  virtual absl::StatusOr<std::vector<SweepRecord>> ListSweeps() = 0;
  // Replaces state, reason and updated_unix_ms. NotFound if no such sweep.
  virtual absl::Status UpdateSweep(const SweepRecord& sweep) = 0;

  // Searches, as sweeps: a repeated non-empty client_request_id returns the
  // existing search's id and stores nothing; Get is NotFound for no such
  // search; List is newest first; Update replaces state, reason and
  // updated_unix_ms.
  virtual absl::StatusOr<int64_t> CreateSearch(const SearchRecord& search) = 0;
  virtual absl::StatusOr<SearchRecord> GetSearch(int64_t id) = 0;
  virtual absl::StatusOr<std::vector<SearchRecord>> ListSearches() = 0;
  virtual absl::Status UpdateSearch(const SearchRecord& search) = 0;
  // Inserts the search's job, or replaces the one with its (search_id, trial,
  // rung). NotFound if no such search.
  virtual absl::Status PutSearchJob(const SearchJobRecord& job) = 0;
  // The search's jobs ordered by (trial, rung); empty for no such search.
  virtual absl::StatusOr<std::vector<SearchJobRecord>> ListSearchJobs(
      int64_t search_id) = 0;

  // Stores a token and returns its id.
  virtual absl::StatusOr<int64_t> CreateToken(const TokenRecord& token) = 0;
  // NotFound if no such token.
  virtual absl::StatusOr<TokenRecord> GetToken(int64_t id) = 0;
  virtual absl::StatusOr<std::vector<TokenRecord>> ListTokens() = 0;
  // Marks the token revoked; NotFound if no such token.
  virtual absl::Status RevokeToken(int64_t id) = 0;
  // A number that differs from the last call's whenever another process (or
  // another connection) has written to the store since, e.g. `tessera-coordinator
  // token revoke`; this store's own writes do not change it.
  virtual absl::StatusOr<int64_t> ExternalWrites() = 0;
  // Replaces the stored usage of each user named.
  virtual absl::Status PutUsage(const std::vector<UsageRecord>& usage) = 0;
  virtual absl::StatusOr<std::vector<UsageRecord>> ListUsage() = 0;
  // What a job has stored so far (every attempt).
  virtual absl::StatusOr<JobOutputUsage> GetJobOutputUsage(int64_t job_id) = 0;

  // Inserts the allocation, or replaces the one with its slurm_job_id.
  virtual absl::Status PutSlurmAllocation(const SlurmAllocationRecord& allocation) = 0;
  // Removes it; removing one that is not stored is not an error.
  virtual absl::Status DeleteSlurmAllocation(const std::string& slurm_job_id) = 0;
  // Every stored allocation, oldest submission first.
  virtual absl::StatusOr<std::vector<SlurmAllocationRecord>> ListSlurmAllocations() = 0;

  // The space on the file system that holds the store, for its reserve
  // (StoreWriter). The default knows none.
  virtual absl::StatusOr<DiskSpace> GetDiskSpace() { return DiskSpace{}; }
  // Gives back the space the store's journal holds (SQLite: a TRUNCATE
  // checkpoint of the WAL), for a disk below its reserve. The default has none.
  virtual absl::Status CompactJournal() { return absl::OkStatus(); }
  // Keeps the journal at about `bytes` at most (plus the one transaction being
  // committed) from every commit on, so that it cannot grow into a small disk's
  // reserve between two checks of the free space. The default has no journal.
  virtual absl::Status LimitJournal(int64_t /*bytes*/) { return absl::OkStatus(); }

  // Database retention (db_retention.h). Finished jobs (SUCCEEDED, FAILED,
  // CANCELLED) whose metrics or logs are not yet dropped, oldest end first
  // (ties: lowest id first). Never a job that is not finished.
  virtual absl::StatusOr<std::vector<FinishedJobOutputs>> ListFinishedJobOutputs() = 0;
  // Downsamples a finished job's metrics to at most `max_points` points per
  // series, keeping every evaluation point (metric_downsampling.h), and marks
  // them downsampled; returns the rows removed. The note's event, if any, is
  // added to the job's events. FailedPrecondition for a job that is not
  // finished; NotFound for none. Deletes in transactions of bounded size, so
  // other calls run between them.
  virtual absl::StatusOr<int64_t> DownsampleMetrics(int64_t job_id, int max_points,
                                                    const RetentionNote& note) = 0;
  // For the size budget: thins a finished job's metrics to each series' last
  // point, or drops them, a kept metric's points (IsKeptMetric in
  // common/metric_names.h) excepted either way (SizeCut in
  // metric_downsampling.h), and marks them thinned or dropped; returns the
  // rows removed. What is kept is written again, so that the pages it shared
  // with what is removed are given back. Notes and errors as
  // DownsampleMetrics.
  virtual absl::StatusOr<int64_t> ThinMetrics(int64_t job_id,
                                              const RetentionNote& note) = 0;
  virtual absl::StatusOr<int64_t> DropMetrics(int64_t job_id,
                                              const RetentionNote& note) = 0;
  // Deletes a finished job's log chunks and marks them dropped; returns the
  // chunks removed. Notes and errors as DownsampleMetrics.
  virtual absl::StatusOr<int64_t> DropLogs(int64_t job_id, const RetentionNote& note) = 0;
  virtual absl::StatusOr<StoreSize> GetStoreSize() = 0;
  // Gives the free pages back to the file system (SQLite: incremental vacuum,
  // then a TRUNCATE checkpoint of the WAL).
  virtual absl::Status ReclaimSpace() = 0;
  virtual absl::StatusOr<StoreStats> GetStoreStats() = 0;

  // The secret stored under `name`; stores `value_if_new` first if there is
  // none, atomically, so that concurrent callers agree on one value.
  virtual absl::StatusOr<std::string> GetOrCreateSecret(
      const std::string& name, const std::string& value_if_new) = 0;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_STORE_H_
