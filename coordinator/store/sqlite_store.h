// SqliteStore: the Store kept in one SQLite database, the coordinator's durable
// state. Open() takes a file path, or ":memory:" for a private in-memory
// database (tests). A file database runs in WAL mode with synchronous=NORMAL, so
// a commit costs no fsync and readers never block the writer; a crash may lose
// the last few commits but never corrupts the file.
//
// Schema: numbered migrations, applied in one transaction when the database is
// opened and recorded in the schema_version table, bring any older database to
// kSchemaVersion; a database newer than this binary is refused. Job states are
// stored as text, the JobState enum name without its "JOB_STATE_" prefix
// ("QUEUED", "RUNNING", ...), so the file reads well in the sqlite3 shell. Metric
// and rank values that are NaN are stored as NULL and read back as NaN.
//
// Errors: NotFound for a missing job (including rows that refer to one),
// ResourceExhausted when the disk (or Options::max_size_bytes) is full,
// Unavailable when another connection holds the database locked past the busy
// timeout, DataLoss for a corrupt file, Internal for any other SQLite failure;
// messages carry SQLite's own text. A failed call leaves the database as it was.
//
// Thread-safety: safe from any thread. One connection guarded by one mutex;
// every call is one transaction, and calls are serialised.
#ifndef TESSERA_COORDINATOR_STORE_SQLITE_STORE_H_
#define TESSERA_COORDINATOR_STORE_SQLITE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store/metric_downsampling.h"
#include "coordinator/store/store.h"

// SQLite's handle types, declared here so that only the store's own sources
// (sqlite_util.h and the files that include it) include sqlite3.h.
struct sqlite3;
struct sqlite3_stmt;

namespace tessera {

// The implementation is split by concern: sqlite_store.cc (opening, statement
// cache, transactions), sqlite_schema.cc (migrations), and one sqlite_store_*.cc
// per table family (jobs, workers, metrics_logs, sweeps, searches, credentials).
class SqliteStore : public Store {
 public:
  struct Options {
    // How long a call waits for a lock held by another connection (another
    // process opening the same file) before failing with Unavailable.
    int busy_timeout_ms = 5000;
    // Largest size in bytes the database may grow to; a write past it fails with
    // ResourceExhausted exactly as on a full disk. 0: no limit.
    int64_t max_size_bytes = 0;
    // Apply migrations only up to this version; 0: all. Lets tests create a
    // database with an older schema and check the upgrade.
    int migrate_to_version = 0;
    // Keep the file in SQLite's incremental auto-vacuum mode, so that
    // ReclaimSpace can give pages back: set on a new database before its
    // tables, and on an older one by one VACUUM when it is opened (a failed
    // VACUUM, say for lack of space, is logged and tried at the next open).
    // false: leave the mode as it is (tests make an older database with it).
    bool incremental_vacuum = true;
  };

  // The schema version this binary creates and understands.
  static constexpr int kSchemaVersion = 15;

  // Creates the database file 0600 when missing; FailedPrecondition when it
  // (or its -wal or -shm file) is readable or writable by group or others.
  static absl::Status CheckFileModes(const std::string& path);

  // Opens (creating if needed) the database at `path`, or a private in-memory
  // database for ":memory:", and migrates it to kSchemaVersion.
  // FailedPrecondition if the database's schema is newer than kSchemaVersion.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                           const Options& options);

  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;
  ~SqliteStore() override;

  absl::StatusOr<int64_t> CreateJob(const JobRecord& job) override;
  absl::StatusOr<JobRecord> GetJob(int64_t id) override;
  using Store::ListJobs;
  absl::StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override;
  absl::StatusOr<std::vector<JobRecord>> ListActiveJobs() override;
  absl::Status UpdateJob(const JobRecord& job) override;
  absl::StatusOr<std::vector<JobEvent>> ListEvents(int64_t job_id) override;

  absl::Status UpsertWorker(const WorkerRecord& worker) override;
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers() override;

  absl::Status PutRanks(const std::vector<RankRecord>& ranks) override;
  absl::StatusOr<std::vector<RankRecord>> GetRanks(int64_t job_id,
                                                   int32_t attempt) override;

  absl::Status AppendLog(const LogChunk& chunk) override;
  absl::StatusOr<int64_t> LogEnd(int64_t job_id, int32_t attempt, int32_t rank) override;
  absl::StatusOr<std::string> ReadLog(int64_t job_id, int32_t attempt, int32_t rank,
                                      int64_t from_offset, int64_t max_bytes) override;
  absl::Status AppendMetrics(const std::vector<MetricRow>& rows) override;
  absl::StatusOr<std::vector<MetricRow>> QueryMetrics(const MetricQuery& query) override;

  absl::StatusOr<int64_t> CreateSweep(const SweepRecord& sweep) override;
  absl::StatusOr<SweepRecord> GetSweep(int64_t id) override;
  absl::StatusOr<std::vector<SweepRecord>> ListSweeps() override;
  absl::Status UpdateSweep(const SweepRecord& sweep) override;

  absl::StatusOr<int64_t> CreateSearch(const SearchRecord& search) override;
  absl::StatusOr<SearchRecord> GetSearch(int64_t id) override;
  absl::StatusOr<std::vector<SearchRecord>> ListSearches() override;
  absl::Status UpdateSearch(const SearchRecord& search) override;
  absl::Status PutSearchJob(const SearchJobRecord& job) override;
  absl::StatusOr<std::vector<SearchJobRecord>> ListSearchJobs(int64_t search_id) override;

  absl::StatusOr<int64_t> CreateToken(const TokenRecord& token) override;
  absl::StatusOr<TokenRecord> GetToken(int64_t id) override;
  absl::StatusOr<std::vector<TokenRecord>> ListTokens() override;
  absl::Status RevokeToken(int64_t id) override;
  absl::StatusOr<int64_t> ExternalWrites() override;  // PRAGMA data_version
  absl::Status PutUsage(const std::vector<UsageRecord>& usage) override;
  absl::StatusOr<std::vector<UsageRecord>> ListUsage() override;
  absl::Status PutWorkerCredential(const WorkerCredentialRecord& credential) override;
  absl::StatusOr<std::vector<WorkerCredentialRecord>> ListWorkerCredentials() override;
  absl::Status PutSlurmAllocation(const SlurmAllocationRecord& allocation) override;
  absl::Status DeleteSlurmAllocation(const std::string& slurm_job_id) override;
  absl::StatusOr<std::vector<SlurmAllocationRecord>> ListSlurmAllocations() override;
  absl::StatusOr<JobOutputUsage> GetJobOutputUsage(int64_t job_id) override;
  absl::StatusOr<std::string> GetOrCreateSecret(const std::string& name,
                                                const std::string& value_if_new) override;
  // statvfs of the database file's file system; unknown for ":memory:".
  absl::StatusOr<DiskSpace> GetDiskSpace() override;
  // PRAGMA wal_checkpoint(TRUNCATE): the WAL's pages go into the database and
  // the WAL file is cut to zero bytes. A no-op for ":memory:".
  absl::Status CompactJournal() override;
  // PRAGMA wal_autocheckpoint and journal_size_limit: each commit that leaves
  // the WAL at `bytes` or more checkpoints it, the next write starts it over,
  // and its file is cut back to `bytes`. Never above SQLite's own 1,000 pages.
  // A no-op for ":memory:".
  absl::Status LimitJournal(int64_t bytes) override;

  absl::StatusOr<std::vector<FinishedJobOutputs>> ListFinishedJobOutputs() override;
  absl::StatusOr<int64_t> DownsampleMetrics(int64_t job_id, int max_points,
                                            const RetentionNote& note) override;
  absl::StatusOr<int64_t> ThinMetrics(int64_t job_id, const RetentionNote& note) override;
  absl::StatusOr<int64_t> DropMetrics(int64_t job_id, const RetentionNote& note) override;
  absl::StatusOr<int64_t> DropLogs(int64_t job_id, const RetentionNote& note) override;
  absl::StatusOr<StoreSize> GetStoreSize() override;
  // PRAGMA incremental_vacuum, then CompactJournal's checkpoint.
  absl::Status ReclaimSpace() override;
  // Per-table sizes come from SQLite's dbstat table where it is built in
  // (unknown, -1, where not); row counts scan the tables.
  absl::StatusOr<StoreStats> GetStoreStats() override;

  // PRAGMA auto_vacuum: 0 none, 1 full, 2 incremental.
  absl::StatusOr<int> AutoVacuumMode();

  // The highest schema version recorded in the database's schema_version table.
  absl::StatusOr<int> SchemaVersion();
  // SQLite's journal mode for the database: "wal" for a file, "memory" for
  // ":memory:".
  absl::StatusOr<std::string> JournalMode();
  // PRAGMA synchronous as it stands after the last write: 2 (FULL) after job
  // state, 1 (NORMAL) after metrics or logs.
  absl::StatusOr<int> SynchronousLevel();

 private:
  struct DbCloser {
    void operator()(sqlite3* db) const;
  };
  struct StatementFinalizer {
    void operator()(sqlite3_stmt* stmt) const;
  };
  using DbHandle = std::unique_ptr<sqlite3, DbCloser>;
  using StatementHandle = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;
  class Transaction;  // defined in sqlite_util.h

  explicit SqliteStore(DbHandle db);

  absl::Status Configure(const std::string& path, const Options& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies every migration newer than the database's version, all in one
  // transaction.
  absl::Status Migrate(int up_to_version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Options::incremental_vacuum on a database made without it: one VACUUM.
  // Logs and goes on when the VACUUM fails.
  void EnableIncrementalVacuum() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retention's steps (sqlite_store_retention.cc). The job's state, checked
  // finished; one bounded transaction of deletes, its row count; the mark and
  // the note's event.
  absl::Status CheckFinished(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> DeleteMetricPoints(int64_t job_id,
                                             const std::vector<MetricPointKey>& keys,
                                             size_t begin, size_t end);
  absl::Status MarkRetained(int64_t job_id, int metrics, int logs,
                            const RetentionNote& note) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ThinMetrics and DropMetrics: the job's metrics rewritten in bounded
  // transactions, each over whole steps from `from_step` on, which deletes
  // them and writes back what `cut` keeps (so that the pages they filled are
  // given back); the rows it removed and the step after it, or nullopt past
  // the job's last step.
  struct MetricStepsCut {
    int64_t removed = 0;
    int64_t next_step = 0;
  };
  absl::StatusOr<int64_t> CutMetrics(int64_t job_id, SizeCut cut, int mark,
                                     const RetentionNote& note);
  absl::StatusOr<std::optional<MetricStepsCut>> CutMetricSteps(int64_t job_id,
                                                               int64_t from_step,
                                                               SizeCut cut,
                                                               const SeriesEnds& ends);
  absl::Status AddTableStats(StoreStats& stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddOldestKept(StoreStats& stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<StoreSize> SizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Job state (jobs, events, ranks, workers) commits with synchronous=FULL, so
  // an acknowledged job survives power loss; metrics and logs with NORMAL, which
  // in WAL mode can lose only the last commits on power loss, never corrupt.
  absl::Status SetDurability(bool full) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Begins a transaction: a write transaction takes the database's write lock up
  // front (BEGIN IMMEDIATE) so it never fails half-way on a lock upgrade.
  absl::StatusOr<Transaction> Begin(bool write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cached prepared statement for `sql`, prepared on first use. `sql` must
  // have static storage (a string constant): its address is the cache key.
  absl::StatusOr<sqlite3_stmt*> Prepare(const char* sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  DbHandle db_ ABSL_GUARDED_BY(mu_);
  // Declared after db_ so that statements are finalized before it closes.
  std::map<const char*, StatementHandle> statements_ ABSL_GUARDED_BY(mu_);
  bool is_file_ ABSL_GUARDED_BY(mu_) = false;    // WAL file database (not :memory:)
  std::string path_ ABSL_GUARDED_BY(mu_);        // the file; empty for :memory:
  bool sync_full_ ABSL_GUARDED_BY(mu_) = false;  // current PRAGMA synchronous is FULL
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_SQLITE_STORE_H_
