// SqliteStore's schema: the numbered migrations that create and upgrade its
// tables, Migrate(), which applies them, and SchemaVersion().
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <iterator>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/sqlite_util.h"

namespace tessera {
namespace {

using sqlite_internal::SqliteError;
using sqlite_internal::Statement;

// One migration per schema version, applied in order. A later schema version
// appends an entry here; existing entries never change, since databases in the
// field have already applied them.
struct Migration {
  int version;
  const char* sql;
};

constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  pending_reason TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  spec BLOB NOT NULL,
  spec_yaml TEXT NOT NULL,
  client_request_id TEXT UNIQUE,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, id);

CREATE TABLE events (
  seq INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs (id),
  time_ms INTEGER NOT NULL,
  from_state TEXT,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, seq);

CREATE TABLE workers (
  name TEXT PRIMARY KEY,
  hostname TEXT NOT NULL,
  slots INTEGER NOT NULL,
  device_kind TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL
);

CREATE TABLE ranks (
  job_id INTEGER NOT NULL REFERENCES jobs (id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  worker TEXT NOT NULL,
  slot INTEGER NOT NULL,
  state TEXT NOT NULL,
  pid INTEGER NOT NULL,
  exit_code INTEGER NOT NULL,
  signal INTEGER NOT NULL,
  has_result INTEGER NOT NULL,
  param_hash TEXT NOT NULL,
  test_accuracy REAL,
  test_loss REAL,
  PRIMARY KEY (job_id, attempt, rank)
) WITHOUT ROWID;

-- The key is the set (job_id, attempt, rank, step, name); its columns are
-- ordered so that QueryMetrics' ORDER BY (step, rank, name) is a range scan of
-- the primary key with no sort.
CREATE TABLE metrics (
  job_id INTEGER NOT NULL REFERENCES jobs (id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  time_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, step, rank, name, attempt)
) WITHOUT ROWID;
)sql"},
    {2, R"sql(
ALTER TABLE ranks ADD COLUMN exit_reason TEXT NOT NULL DEFAULT '';
CREATE TABLE logs (
  job_id INTEGER NOT NULL REFERENCES jobs (id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  offset INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (job_id, attempt, rank, offset)
) WITHOUT ROWID;
)sql"},
    {3, R"sql(
ALTER TABLE jobs ADD COLUMN sweep_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN sweep_point INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_sweep ON jobs (sweep_id, sweep_point);
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec BLOB NOT NULL,
  spec_yaml TEXT NOT NULL,
  client_request_id TEXT UNIQUE,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
)sql"},
    {4, R"sql(
CREATE TABLE tokens (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  hash BLOB NOT NULL,
  created_ms INTEGER NOT NULL,
  revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE secrets (
  name TEXT PRIMARY KEY,
  value BLOB NOT NULL
);
)sql"},
    // Who submitted each job and sweep; rows from before have no owner.
    {5, R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sweeps ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql"},
    // Admin tokens; per-user usage for fair share; owner-scoped listing.
    {6, R"sql(
ALTER TABLE tokens ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
CREATE TABLE usage (
  user TEXT PRIMARY KEY,
  slot_seconds REAL NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE INDEX jobs_by_owner ON jobs (owner, id);
)sql"},
    // Per-worker credentials, bound to the worker's name (hashes only).
    {7, R"sql(
CREATE TABLE worker_credentials (
  worker TEXT PRIMARY KEY,
  hash BLOB NOT NULL,
  issued_ms INTEGER NOT NULL
);
)sql"},
    // Attempts ended by a drain or preemption (not counted as restarts);
    // workers' pool and Slurm allocation.
    {8, R"sql(
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN pool TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN slurm_job_id TEXT NOT NULL DEFAULT '';
)sql"},
    // An admin's drain outlives a coordinator restart.
    {9, R"sql(
ALTER TABLE workers ADD COLUMN admin_drain TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN admin_drain_deadline_ms INTEGER NOT NULL DEFAULT 0;
)sql"},
    // The GPUs a worker owns, comma-separated (ids never hold a comma).
    {10, R"sql(
ALTER TABLE workers ADD COLUMN gpu_ids TEXT NOT NULL DEFAULT '';
)sql"},
    // The Slurm allocations the coordinator submitted and has not seen end,
    // so that a restart can cancel the idle ones and revoke their credentials.
    {11, R"sql(
CREATE TABLE slurm_allocations (
  slurm_job_id TEXT PRIMARY KEY,
  pool TEXT NOT NULL,
  job_id INTEGER NOT NULL,
  owner TEXT NOT NULL,
  submitted_as TEXT NOT NULL,
  nodes INTEGER NOT NULL,
  state TEXT NOT NULL,
  cancel_sent INTEGER NOT NULL,
  credential_path TEXT NOT NULL,
  credential_id INTEGER NOT NULL,
  submitted_ms INTEGER NOT NULL,
  running_since_ms INTEGER NOT NULL
);
)sql"},
    // What a job's metrics and logs lost while the database's disk was below
    // its reserve (shed so that job state could still be stored).
    {12, R"sql(
ALTER TABLE jobs ADD COLUMN metrics_not_stored INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN log_lines_not_stored INTEGER NOT NULL DEFAULT 0;
)sql"},
    // What database retention has done to each finished job's outputs
    // (metrics: 1 downsampled, 2 dropped; logs: 1 dropped; no row: kept
    // whole). From this version on the file is kept in incremental
    // auto-vacuum mode; SQLite can only switch an existing file to it with a
    // VACUUM, which cannot run inside this transaction, so Open() runs it
    // right after (SqliteStore::EnableIncrementalVacuum).
    {13, R"sql(
CREATE TABLE job_retention (
  job_id INTEGER PRIMARY KEY REFERENCES jobs (id),
  metrics INTEGER NOT NULL DEFAULT 0,
  logs INTEGER NOT NULL DEFAULT 0,
  updated_ms INTEGER NOT NULL
);
)sql"},
    // An eval job's result (tessera.v1.EvalResult, serialized) beside the
    // rank's test accuracy; empty for other ranks.
    {14, R"sql(
ALTER TABLE ranks ADD COLUMN eval_result BLOB NOT NULL DEFAULT x'';
)sql"},
    // Hyperparameter searches and their trials' jobs, one row per (trial,
    // rung), written before the job is submitted and again once it ended.
    {15, R"sql(
CREATE TABLE searches (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec BLOB NOT NULL,
  spec_yaml TEXT NOT NULL,
  client_request_id TEXT UNIQUE,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  owner TEXT NOT NULL
);
CREATE TABLE search_jobs (
  search_id INTEGER NOT NULL REFERENCES searches (id),
  trial INTEGER NOT NULL,
  rung INTEGER NOT NULL,
  job_id INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  job_state TEXT NOT NULL,
  has_metric INTEGER NOT NULL,
  metric REAL,
  steps INTEGER NOT NULL,
  reason TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (search_id, trial, rung)
) WITHOUT ROWID;
)sql"},
};

constexpr int kLatestVersion = kMigrations[std::size(kMigrations) - 1].version;
static_assert(kLatestVersion == SqliteStore::kSchemaVersion,
              "kSchemaVersion must name the last migration");

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kCreateSchemaVersion[] =
    "CREATE TABLE IF NOT EXISTS schema_version ("
    "version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)";
constexpr char kSelectSchemaVersion[] =
    "SELECT COALESCE(MAX(version), 0) FROM schema_version";
constexpr char kInsertSchemaVersion[] =
    "INSERT INTO schema_version (version, applied_ms) VALUES (?1, ?2)";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status SqliteStore::Migrate(int up_to_version) {
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  int current = 0;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * create, Prepare(kCreateSchemaVersion));
    RETURN_IF_ERROR(Statement(db_.get(), create).Run());
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSchemaVersion));
    Statement version(db_.get(), select);
    ASSIGN_OR_RETURN(bool row, version.Step());
    if (row) current = static_cast<int>(version.Int(0));
  }
  if (current > kLatestVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("database schema version ", current,
                     " is newer than this coordinator supports (", kLatestVersion, ")"));
  }
  for (const Migration& migration : kMigrations) {
    if (migration.version <= current) continue;
    if (up_to_version > 0 && migration.version > up_to_version) break;
    char* error = nullptr;
    int rc = sqlite3_exec(db_.get(), migration.sql, nullptr, nullptr, &error);
    if (rc != SQLITE_OK) {
      absl::Status status = SqliteError(
          db_.get(), rc, absl::StrCat("schema migration ", migration.version));
      sqlite3_free(error);
      return status;
    }
    ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertSchemaVersion));
    RETURN_IF_ERROR(Statement(db_.get(), insert)
                        .BindInt(1, migration.version)
                        .BindInt(2, NowUnixMs())
                        .Run());
  }
  return txn.Commit();
}

absl::StatusOr<int> SqliteStore::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSchemaVersion));
  Statement row(db_.get(), select);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::InternalError("schema_version query returned no row");
  return static_cast<int>(row.Int(0));
}

}  // namespace tessera
