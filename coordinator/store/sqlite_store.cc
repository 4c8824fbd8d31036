#include "coordinator/store/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

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
};

constexpr int kLatestVersion = kMigrations[std::size(kMigrations) - 1].version;
static_assert(kLatestVersion == SqliteStore::kSchemaVersion,
              "kSchemaVersion must name the last migration");

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kBeginRead[] = "BEGIN";
constexpr char kBeginWrite[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";

constexpr char kCreateSchemaVersion[] =
    "CREATE TABLE IF NOT EXISTS schema_version ("
    "version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)";
constexpr char kSelectSchemaVersion[] =
    "SELECT COALESCE(MAX(version), 0) FROM schema_version";
constexpr char kInsertSchemaVersion[] =
    "INSERT INTO schema_version (version, applied_ms) VALUES (?1, ?2)";
constexpr char kJournalMode[] = "PRAGMA journal_mode";

constexpr char kFindJobByRequest[] = "SELECT id FROM jobs WHERE client_request_id = ?1";
constexpr char kInsertJob[] =
    "INSERT INTO jobs (name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
// The three job queries select the columns ReadJob() reads, in its order.
constexpr char kSelectJob[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner FROM jobs "
    "WHERE id "
    "= ?1";
constexpr char kListJobs[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner FROM jobs "
    "WHERE (?1 = '' OR state = ?1) AND (?2 = 0 OR sweep_id = ?2) ORDER BY id DESC "
    "LIMIT ?3";
constexpr char kListActiveJobs[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner FROM jobs "
    "WHERE state IN ('QUEUED', 'SCHEDULED', 'RUNNING') ORDER BY id";
constexpr char kFindSweepByRequest[] =
    "SELECT id FROM sweeps WHERE client_request_id = ?1";
constexpr char kInsertSweep[] =
    "INSERT INTO sweeps (name, state, reason, spec, spec_yaml, client_request_id, "
    "created_ms, updated_ms, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
// The two sweep queries select the columns ReadSweep() reads, in its order.
constexpr char kSelectSweep[] =
    "SELECT id, name, state, reason, spec, spec_yaml, client_request_id, created_ms, "
    "updated_ms, owner FROM sweeps WHERE id = ?1";
constexpr char kListSweeps[] =
    "SELECT id, name, state, reason, spec, spec_yaml, client_request_id, created_ms, "
    "updated_ms, owner FROM sweeps ORDER BY id DESC";
constexpr char kUpdateSweep[] =
    "UPDATE sweeps SET state = ?2, reason = ?3, updated_ms = ?4 WHERE id = ?1";
constexpr char kInsertToken[] =
    "INSERT INTO tokens (kind, name, hash, created_ms) VALUES (?1, ?2, ?3, ?4)";
// The two token queries select the columns ReadToken() reads, in its order.
constexpr char kSelectToken[] =
    "SELECT id, kind, name, hash, created_ms, revoked FROM tokens WHERE id = ?1";
constexpr char kListTokens[] =
    "SELECT id, kind, name, hash, created_ms, revoked FROM tokens ORDER BY id";
constexpr char kRevokeToken[] = "UPDATE tokens SET revoked = 1 WHERE id = ?1";
constexpr char kSelectSecret[] = "SELECT value FROM secrets WHERE name = ?1";
constexpr char kInsertSecret[] = "INSERT INTO secrets (name, value) VALUES (?1, ?2)";
constexpr char kSelectJobState[] = "SELECT state FROM jobs WHERE id = ?1";
constexpr char kUpdateJob[] =
    "UPDATE jobs SET state = ?2, reason = ?3, pending_reason = ?4, attempt = ?5, "
    "updated_ms = ?6 WHERE id = ?1";
constexpr char kInsertEvent[] =
    "INSERT INTO events (job_id, time_ms, from_state, to_state, reason) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr char kListEvents[] =
    "SELECT job_id, time_ms, from_state, to_state, reason FROM events "
    "WHERE job_id = ?1 ORDER BY seq";

constexpr char kUpsertWorker[] =
    "INSERT OR REPLACE INTO workers (name, hostname, slots, device_kind, epoch, "
    "last_seen_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
constexpr char kListWorkers[] =
    "SELECT name, hostname, slots, device_kind, epoch, last_seen_ms FROM workers "
    "ORDER BY name";

constexpr char kPutRank[] =
    "INSERT OR REPLACE INTO ranks (job_id, attempt, rank, worker, slot, state, pid, "
    "exit_code, signal, has_result, param_hash, test_accuracy, test_loss, exit_reason) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
constexpr char kGetRanks[] =
    "SELECT job_id, attempt, rank, worker, slot, state, pid, exit_code, signal, "
    "has_result, param_hash, test_accuracy, test_loss, exit_reason FROM ranks "
    "WHERE job_id = ?1 AND attempt = ?2 ORDER BY rank";

constexpr char kInsertLog[] =
    "INSERT OR IGNORE INTO logs (job_id, attempt, rank, offset, data) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr char kReadLog[] =
    "SELECT offset, data FROM logs WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3 "
    "AND offset + length(data) > ?4 ORDER BY offset";
constexpr char kLogEnd[] =
    "SELECT COALESCE(MAX(offset + length(data)), 0) FROM logs "
    "WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3";

constexpr char kInsertMetric[] =
    "INSERT OR IGNORE INTO metrics (job_id, attempt, rank, step, name, value, time_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
// attempt breaks ties when a restarted attempt reports a step again.
constexpr char kQueryMetrics[] =
    "SELECT job_id, attempt, rank, step, name, value, time_ms FROM metrics "
    "WHERE job_id = ?1 AND step > ?2 AND (?3 = '' OR name = ?3) "
    "ORDER BY step, rank, name, attempt LIMIT ?4";

// Maps a SQLite result code to a status whose code says what the caller can do
// about it, keeping SQLite's message.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  // sqlite3_errmsg describes the most recent failure on this connection, which
  // is the one being reported when rc came from it; otherwise use rc's text.
  const char* message = db != nullptr && sqlite3_extended_errcode(db) == rc
                            ? sqlite3_errmsg(db)
                            : sqlite3_errstr(rc);
  std::string text = absl::StrCat(what, ": ", message, " (sqlite code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(std::move(text));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(std::move(text));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(std::move(text));
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return absl::NotFoundError(
            absl::StrCat(what, ": refers to a job that does not exist"));
      }
      return absl::InternalError(std::move(text));
    default:
      return absl::InternalError(std::move(text));
  }
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Job states are stored by the names common/job_state.h gives them ("RUNNING").
absl::StatusOr<std::string> StateText(v1::JobState state) {
  if (!v1::JobState_IsValid(state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job state ", static_cast<int>(state), " is not a JobState"));
  }
  return JobStateName(state);
}

absl::StatusOr<v1::JobState> ParseStateText(absl::string_view text) {
  v1::JobState state;
  if (!v1::JobState_Parse(absl::StrCat("JOB_STATE_", text), &state)) {
    return absl::DataLossError(absl::StrCat("stored job state '", text, "' is unknown"));
  }
  return state;
}

// A cached statement in use: binds parameters, steps, reads columns, and on
// destruction resets the statement and clears its bindings for the next user.
// Bind errors are kept and reported by the next Step().
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { Reset(); }

  // Makes the statement ready to be bound and run again.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Statement& BindInt(int index, int64_t value) {
    return Check(sqlite3_bind_int64(stmt_, index, value));
  }
  // NaN binds as NULL, which SQLite would store for it anyway.
  Statement& BindDouble(int index, double value) {
    return Check(sqlite3_bind_double(stmt_, index, value));
  }
  Statement& BindText(int index, absl::string_view value) {
    return Check(sqlite3_bind_text64(stmt_, index, value.data(), value.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  // Binds NULL for the empty string.
  Statement& BindTextOrNull(int index, absl::string_view value) {
    if (value.empty()) return Check(sqlite3_bind_null(stmt_, index));
    return BindText(index, value);
  }
  Statement& BindBlob(int index, absl::string_view value) {
    return Check(
        sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT));
  }

  // Runs the statement to its next row: true when a row is ready to read, false
  // when it is done.
  absl::StatusOr<bool> Step() {
    RETURN_IF_ERROR(bind_status_);
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, sqlite3_sql(stmt_));
  }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    ASSIGN_OR_RETURN(bool row, Step());
    if (row) {
      return absl::InternalError(
          absl::StrCat("statement returned a row: ", sqlite3_sql(stmt_)));
    }
    return absl::OkStatus();
  }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  bool IsNull(int column) const {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }
  // NULL reads as NaN.
  double Double(int column) const {
    if (IsNull(column)) return std::numeric_limits<double>::quiet_NaN();
    return sqlite3_column_double(stmt_, column);
  }
  // TEXT or BLOB as bytes; NULL reads as "".
  std::string Bytes(int column) const {
    const void* data = sqlite3_column_blob(stmt_, column);
    int size = sqlite3_column_bytes(stmt_, column);
    if (data == nullptr) return std::string();
    return std::string(static_cast<const char*>(data), size);
  }

 private:
  Statement& Check(int rc) {
    if (rc != SQLITE_OK && bind_status_.ok()) {
      bind_status_ = SqliteError(db_, rc, absl::StrCat("bind: ", sqlite3_sql(stmt_)));
    }
    return *this;
  }

  sqlite3* const db_;
  sqlite3_stmt* const stmt_;
  absl::Status bind_status_;
};

absl::StatusOr<JobRecord> ReadJob(const Statement& row) {
  JobRecord job;
  job.id = row.Int(0);
  job.name = row.Bytes(1);
  ASSIGN_OR_RETURN(job.state, ParseStateText(row.Bytes(2)));
  job.reason = row.Bytes(3);
  job.pending_reason = row.Bytes(4);
  job.attempt = static_cast<int32_t>(row.Int(5));
  if (!job.spec.ParseFromString(row.Bytes(6))) {
    return absl::DataLossError(
        absl::StrCat("stored spec of job ", job.id, " is corrupt"));
  }
  job.spec_yaml = row.Bytes(7);
  job.client_request_id = row.Bytes(8);
  job.created_unix_ms = row.Int(9);
  job.updated_unix_ms = row.Int(10);
  job.sweep_id = row.Int(11);
  job.sweep_point = static_cast<int32_t>(row.Int(12));
  job.owner = row.Bytes(13);
  return job;
}

absl::StatusOr<TokenRecord> ReadToken(const Statement& row) {
  TokenRecord token;
  token.id = row.Int(0);
  token.kind = row.Bytes(1);
  token.name = row.Bytes(2);
  token.hash = row.Bytes(3);
  token.created_unix_ms = row.Int(4);
  token.revoked = row.Int(5) != 0;
  return token;
}

constexpr absl::string_view kSweepStatePrefix = "SWEEP_STATE_";

absl::StatusOr<std::string> SweepStateText(v1::SweepState state) {
  if (!v1::SweepState_IsValid(state) || state == v1::SWEEP_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep state ", static_cast<int>(state), " is not a SweepState"));
  }
  absl::string_view name = v1::SweepState_Name(state);
  name.remove_prefix(kSweepStatePrefix.size());
  return std::string(name);
}

absl::StatusOr<SweepRecord> ReadSweep(const Statement& row) {
  SweepRecord sweep;
  sweep.id = row.Int(0);
  sweep.name = row.Bytes(1);
  const std::string state = row.Bytes(2);
  if (!v1::SweepState_Parse(absl::StrCat(kSweepStatePrefix, state), &sweep.state)) {
    return absl::DataLossError(
        absl::StrCat("stored sweep state '", state, "' is unknown"));
  }
  sweep.reason = row.Bytes(3);
  if (!sweep.spec.ParseFromString(row.Bytes(4))) {
    return absl::DataLossError(
        absl::StrCat("stored spec of sweep ", sweep.id, " is corrupt"));
  }
  sweep.spec_yaml = row.Bytes(5);
  sweep.client_request_id = row.Bytes(6);
  sweep.created_unix_ms = row.Int(7);
  sweep.updated_unix_ms = row.Int(8);
  sweep.owner = row.Bytes(9);
  return sweep;
}

absl::StatusOr<JobEvent> ReadEvent(const Statement& row) {
  JobEvent event;
  event.job_id = row.Int(0);
  event.unix_ms = row.Int(1);
  if (!row.IsNull(2)) {
    ASSIGN_OR_RETURN(event.from_state, ParseStateText(row.Bytes(2)));
  }
  ASSIGN_OR_RETURN(event.to_state, ParseStateText(row.Bytes(3)));
  event.reason = row.Bytes(4);
  return event;
}

absl::StatusOr<WorkerRecord> ReadWorker(const Statement& row) {
  WorkerRecord worker;
  worker.name = row.Bytes(0);
  worker.hostname = row.Bytes(1);
  worker.slots = static_cast<int32_t>(row.Int(2));
  worker.device_kind = row.Bytes(3);
  worker.epoch = row.Int(4);
  worker.last_seen_unix_ms = row.Int(5);
  return worker;
}

absl::StatusOr<RankRecord> ReadRank(const Statement& row) {
  RankRecord rank;
  rank.job_id = row.Int(0);
  rank.attempt = static_cast<int32_t>(row.Int(1));
  rank.rank = static_cast<int32_t>(row.Int(2));
  rank.worker = row.Bytes(3);
  rank.slot = static_cast<int32_t>(row.Int(4));
  absl::StatusOr<RankState> state = ParseRankState(row.Bytes(5));
  if (!state.ok())
    return absl::DataLossError(absl::StrCat("ranks: ", state.status().message()));
  rank.state = *state;
  rank.pid = static_cast<int32_t>(row.Int(6));
  rank.exit_code = static_cast<int32_t>(row.Int(7));
  rank.signal = static_cast<int32_t>(row.Int(8));
  rank.has_result = row.Int(9) != 0;
  rank.param_hash = row.Bytes(10);
  rank.test_accuracy = row.Double(11);
  rank.test_loss = row.Double(12);
  rank.exit_reason = row.Bytes(13);
  return rank;
}

absl::StatusOr<MetricRow> ReadMetric(const Statement& row) {
  MetricRow metric;
  metric.job_id = row.Int(0);
  metric.attempt = static_cast<int32_t>(row.Int(1));
  metric.rank = static_cast<int32_t>(row.Int(2));
  metric.step = row.Int(3);
  metric.name = row.Bytes(4);
  metric.value = row.Double(5);
  metric.unix_ms = row.Int(6);
  return metric;
}

// Steps `statement` to its end, converting each row with `read`.
template <typename Record>
absl::StatusOr<std::vector<Record>> ReadAll(
    Statement& statement, absl::StatusOr<Record> (*read)(const Statement&)) {
  std::vector<Record> records;
  while (true) {
    ASSIGN_OR_RETURN(bool found, statement.Step());
    if (!found) return records;
    ASSIGN_OR_RETURN(Record record, read(statement));
    records.push_back(std::move(record));
  }
}

}  // namespace

// An open transaction; rolled back on destruction unless committed. Holds the
// cached COMMIT and ROLLBACK statements of its store, which must outlive it and
// stay locked while it lives.
class SqliteStore::Transaction {
 public:
  Transaction(sqlite3* db, sqlite3_stmt* commit, sqlite3_stmt* rollback)
      : db_(db), commit_(commit), rollback_(rollback) {}
  Transaction(Transaction&& other)
      : db_(std::exchange(other.db_, nullptr)),
        commit_(other.commit_),
        rollback_(other.rollback_) {}
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction() {
    // SQLite may already have rolled back by itself after some errors (a full
    // disk, for one); only roll back a transaction that is still open.
    if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
      Statement(db_, rollback_).Run().IgnoreError();
    }
  }

  absl::Status Commit() {
    sqlite3* db = std::exchange(db_, nullptr);
    absl::Status status = Statement(db, commit_).Run();
    if (!status.ok() && sqlite3_get_autocommit(db) == 0) {
      Statement(db, rollback_).Run().IgnoreError();
    }
    return status;
  }

 private:
  sqlite3* db_;  // Not owned; nullptr once committed or moved from.
  sqlite3_stmt* commit_;
  sqlite3_stmt* rollback_;
};

void SqliteStore::DbCloser::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

void SqliteStore::StatementFinalizer::operator()(sqlite3_stmt* stmt) const {
  sqlite3_finalize(stmt);
}

SqliteStore::SqliteStore(DbHandle db) : db_(std::move(db)) {}

SqliteStore::~SqliteStore() = default;

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  return Open(path, Options());
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               const Options& options) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                               SQLITE_OPEN_NOMUTEX,  // mu_ serialises all use
                           nullptr);
  // sqlite3_open_v2 returns a handle even on failure; it must still be closed.
  DbHandle db(raw);
  if (rc != SQLITE_OK) {
    return SqliteError(db.get(), rc, absl::StrCat("open ", path));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(db)));
  absl::MutexLock lock(&store->mu_);
  RETURN_IF_ERROR(store->Configure(path, options));
  RETURN_IF_ERROR(store->Migrate(options.migrate_to_version));
  return store;
}

absl::Status SqliteStore::Configure(const std::string& path, const Options& options) {
  sqlite3* db = db_.get();
  sqlite3_extended_result_codes(db, 1);
  int rc = sqlite3_busy_timeout(db, options.busy_timeout_ms);
  if (rc != SQLITE_OK) return SqliteError(db, rc, "busy_timeout");

  // Runs a pragma and returns the text of its first result column, if any.
  auto pragma = [db](const std::string& sql) -> absl::StatusOr<std::string> {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr);
    StatementHandle stmt(raw);
    if (rc != SQLITE_OK) return SqliteError(db, rc, sql);
    Statement statement(db, stmt.get());
    ASSIGN_OR_RETURN(bool row, statement.Step());
    return row ? statement.Bytes(0) : std::string();
  };

  RETURN_IF_ERROR(pragma("PRAGMA foreign_keys = ON").status());
  if (path != ":memory:") {
    ASSIGN_OR_RETURN(std::string mode, pragma("PRAGMA journal_mode = WAL"));
    if (mode != "wal") {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot use WAL journal mode for ", path, ": SQLite chose '", mode, "'"));
    }
    RETURN_IF_ERROR(pragma("PRAGMA synchronous = NORMAL").status());
    is_file_ = true;
    sync_full_ = false;
  }
  if (options.max_size_bytes > 0) {
    ASSIGN_OR_RETURN(std::string page_size, pragma("PRAGMA page_size"));
    int64_t bytes_per_page = std::strtoll(page_size.c_str(), nullptr, 10);
    if (bytes_per_page <= 0) {
      return absl::InternalError(absl::StrCat("unexpected page_size '", page_size, "'"));
    }
    int64_t pages = std::max<int64_t>(1, options.max_size_bytes / bytes_per_page);
    RETURN_IF_ERROR(pragma(absl::StrCat("PRAGMA max_page_count = ", pages)).status());
  }
  return absl::OkStatus();
}

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

absl::StatusOr<sqlite3_stmt*> SqliteStore::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second.get();
  sqlite3_stmt* raw = nullptr;
  int rc =
      sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  StatementHandle stmt(raw);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, absl::StrCat("prepare ", sql));
  sqlite3_stmt* result = stmt.get();
  statements_.emplace(sql, std::move(stmt));
  return result;
}

absl::Status SqliteStore::SetDurability(bool full) {
  if (!is_file_ || sync_full_ == full) return absl::OkStatus();
  int rc = sqlite3_exec(
      db_.get(), full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
      nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "PRAGMA synchronous");
  sync_full_ = full;
  return absl::OkStatus();
}

absl::StatusOr<SqliteStore::Transaction> SqliteStore::Begin(bool write) {
  ASSIGN_OR_RETURN(sqlite3_stmt * begin, Prepare(write ? kBeginWrite : kBeginRead));
  ASSIGN_OR_RETURN(sqlite3_stmt * commit, Prepare(kCommit));
  ASSIGN_OR_RETURN(sqlite3_stmt * rollback, Prepare(kRollback));
  RETURN_IF_ERROR(Statement(db_.get(), begin).Run());
  return Transaction(db_.get(), commit, rollback);
}

absl::StatusOr<int64_t> SqliteStore::CreateJob(const JobRecord& job) {
  ASSIGN_OR_RETURN(std::string state, StateText(job.state));
  std::string spec;
  if (!job.spec.SerializeToString(&spec)) {
    return absl::InvalidArgumentError("job spec cannot be serialized");
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  if (!job.client_request_id.empty()) {
    ASSIGN_OR_RETURN(sqlite3_stmt * find, Prepare(kFindJobByRequest));
    Statement existing(db, find);
    existing.BindText(1, job.client_request_id);
    ASSIGN_OR_RETURN(bool found, existing.Step());
    if (found) return existing.Int(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertJob));
  RETURN_IF_ERROR(Statement(db, insert)
                      .BindText(1, job.name)
                      .BindText(2, state)
                      .BindText(3, job.reason)
                      .BindText(4, job.pending_reason)
                      .BindInt(5, job.attempt)
                      .BindBlob(6, spec)
                      .BindText(7, job.spec_yaml)
                      .BindTextOrNull(8, job.client_request_id)
                      .BindInt(9, job.created_unix_ms)
                      .BindInt(10, job.updated_unix_ms)
                      .BindInt(11, job.sweep_id)
                      .BindInt(12, job.sweep_point)
                      .BindText(13, job.owner)
                      .Run());
  int64_t id = sqlite3_last_insert_rowid(db);
  ASSIGN_OR_RETURN(sqlite3_stmt * event, Prepare(kInsertEvent));
  RETURN_IF_ERROR(Statement(db, event)
                      .BindInt(1, id)
                      .BindInt(2, job.created_unix_ms)
                      .BindTextOrNull(3, "")  // no previous state
                      .BindText(4, state)
                      .BindText(5, job.reason)
                      .Run());
  RETURN_IF_ERROR(txn.Commit());
  return id;
}

// Reads that are one SELECT run in SQLite's implicit per-statement transaction.

absl::StatusOr<JobRecord> SqliteStore::GetJob(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectJob));
  Statement row(db_.get(), select);
  row.BindInt(1, id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  return ReadJob(row);
}

absl::StatusOr<std::vector<JobRecord>> SqliteStore::ListJobs(const JobFilter& filter) {
  std::string state;
  if (filter.state != v1::JOB_STATE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(state, StateText(filter.state));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListJobs));
  Statement rows(db_.get(), select);
  rows.BindText(1, state)
      .BindInt(2, filter.sweep_id)
      .BindInt(3, filter.limit > 0 ? filter.limit : -1);
  return ReadAll(rows, &ReadJob);
}

absl::StatusOr<int64_t> SqliteStore::CreateSweep(const SweepRecord& sweep) {
  ASSIGN_OR_RETURN(std::string state, SweepStateText(sweep.state));
  std::string spec;
  if (!sweep.spec.SerializeToString(&spec)) {
    return absl::InvalidArgumentError("sweep spec cannot be serialized");
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  if (!sweep.client_request_id.empty()) {
    ASSIGN_OR_RETURN(sqlite3_stmt * find, Prepare(kFindSweepByRequest));
    Statement existing(db, find);
    existing.BindText(1, sweep.client_request_id);
    ASSIGN_OR_RETURN(bool found, existing.Step());
    if (found) return existing.Int(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertSweep));
  RETURN_IF_ERROR(Statement(db, insert)
                      .BindText(1, sweep.name)
                      .BindText(2, state)
                      .BindText(3, sweep.reason)
                      .BindBlob(4, spec)
                      .BindText(5, sweep.spec_yaml)
                      .BindTextOrNull(6, sweep.client_request_id)
                      .BindInt(7, sweep.created_unix_ms)
                      .BindInt(8, sweep.updated_unix_ms)
                      .BindText(9, sweep.owner)
                      .Run());
  const int64_t id = sqlite3_last_insert_rowid(db);
  RETURN_IF_ERROR(txn.Commit());
  return id;
}

absl::StatusOr<int64_t> SqliteStore::CreateToken(const TokenRecord& token) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertToken));
  RETURN_IF_ERROR(Statement(db_.get(), insert)
                      .BindText(1, token.kind)
                      .BindText(2, token.name)
                      .BindBlob(3, token.hash)
                      .BindInt(4, token.created_unix_ms)
                      .Run());
  return sqlite3_last_insert_rowid(db_.get());
}

absl::StatusOr<TokenRecord> SqliteStore::GetToken(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectToken));
  Statement row(db_.get(), select);
  row.BindInt(1, id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("token ", id, " not found"));
  return ReadToken(row);
}

absl::StatusOr<std::vector<TokenRecord>> SqliteStore::ListTokens() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListTokens));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadToken);
}

absl::Status SqliteStore::RevokeToken(int64_t id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * update, Prepare(kRevokeToken));
  RETURN_IF_ERROR(Statement(db_.get(), update).BindInt(1, id).Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("token ", id, " not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteStore::GetOrCreateSecret(
    const std::string& name, const std::string& value_if_new) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSecret));
    Statement row(db, select);
    row.BindText(1, name);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (found) return row.Bytes(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertSecret));
  RETURN_IF_ERROR(
      Statement(db, insert).BindText(1, name).BindBlob(2, value_if_new).Run());
  RETURN_IF_ERROR(txn.Commit());
  return value_if_new;
}

absl::StatusOr<SweepRecord> SqliteStore::GetSweep(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSweep));
  Statement row(db_.get(), select);
  row.BindInt(1, id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("sweep ", id, " not found"));
  return ReadSweep(row);
}

absl::StatusOr<std::vector<SweepRecord>> SqliteStore::ListSweeps() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListSweeps));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadSweep);
}

absl::Status SqliteStore::UpdateSweep(const SweepRecord& sweep) {
  ASSIGN_OR_RETURN(std::string state, SweepStateText(sweep.state));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * update, Prepare(kUpdateSweep));
  RETURN_IF_ERROR(Statement(db_.get(), update)
                      .BindInt(1, sweep.id)
                      .BindText(2, state)
                      .BindText(3, sweep.reason)
                      .BindInt(4, sweep.updated_unix_ms)
                      .Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("sweep ", sweep.id, " not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> SqliteStore::ListActiveJobs() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListActiveJobs));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadJob);
}

absl::Status SqliteStore::UpdateJob(const JobRecord& job) {
  ASSIGN_OR_RETURN(std::string state, StateText(job.state));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  std::string old_state;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectJobState));
    Statement row(db, select);
    row.BindInt(1, job.id);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (!found) return absl::NotFoundError(absl::StrCat("job ", job.id, " not found"));
    old_state = row.Bytes(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * update, Prepare(kUpdateJob));
  RETURN_IF_ERROR(Statement(db, update)
                      .BindInt(1, job.id)
                      .BindText(2, state)
                      .BindText(3, job.reason)
                      .BindText(4, job.pending_reason)
                      .BindInt(5, job.attempt)
                      .BindInt(6, job.updated_unix_ms)
                      .Run());
  if (old_state != state) {
    ASSIGN_OR_RETURN(sqlite3_stmt * event, Prepare(kInsertEvent));
    RETURN_IF_ERROR(Statement(db, event)
                        .BindInt(1, job.id)
                        .BindInt(2, job.updated_unix_ms)
                        .BindText(3, old_state)
                        .BindText(4, state)
                        .BindText(5, job.reason)
                        .Run());
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<JobEvent>> SqliteStore::ListEvents(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/false));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectJobState));
    Statement row(db, select);
    row.BindInt(1, job_id);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (!found) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  }
  std::vector<JobEvent> events;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListEvents));
    Statement rows(db, select);
    rows.BindInt(1, job_id);
    ASSIGN_OR_RETURN(events, ReadAll(rows, &ReadEvent));
  }
  RETURN_IF_ERROR(txn.Commit());
  return events;
}

absl::Status SqliteStore::UpsertWorker(const WorkerRecord& worker) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * upsert, Prepare(kUpsertWorker));
  // One statement: SQLite's implicit transaction makes it atomic.
  return Statement(db_.get(), upsert)
      .BindText(1, worker.name)
      .BindText(2, worker.hostname)
      .BindInt(3, worker.slots)
      .BindText(4, worker.device_kind)
      .BindInt(5, worker.epoch)
      .BindInt(6, worker.last_seen_unix_ms)
      .Run();
}

absl::StatusOr<std::vector<WorkerRecord>> SqliteStore::ListWorkers() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListWorkers));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadWorker);
}

absl::Status SqliteStore::PutRanks(const std::vector<RankRecord>& ranks) {
  if (ranks.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * put, Prepare(kPutRank));
    Statement statement(db_.get(), put);
    for (const RankRecord& rank : ranks) {
      statement.Reset();
      RETURN_IF_ERROR(statement.BindInt(1, rank.job_id)
                          .BindInt(2, rank.attempt)
                          .BindInt(3, rank.rank)
                          .BindText(4, rank.worker)
                          .BindInt(5, rank.slot)
                          .BindText(6, RankStateName(rank.state))
                          .BindInt(7, rank.pid)
                          .BindInt(8, rank.exit_code)
                          .BindInt(9, rank.signal)
                          .BindInt(10, rank.has_result ? 1 : 0)
                          .BindText(11, rank.param_hash)
                          .BindDouble(12, rank.test_accuracy)
                          .BindDouble(13, rank.test_loss)
                          .BindText(14, rank.exit_reason)
                          .Run());
    }
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<RankRecord>> SqliteStore::GetRanks(int64_t job_id,
                                                              int32_t attempt) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kGetRanks));
  Statement rows(db_.get(), select);
  rows.BindInt(1, job_id).BindInt(2, attempt);
  return ReadAll(rows, &ReadRank);
}

absl::Status SqliteStore::AppendLog(const LogChunk& chunk) {
  if (chunk.data.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * end_stmt, Prepare(kLogEnd));
    Statement end(db_.get(), end_stmt);
    end.BindInt(1, chunk.job_id).BindInt(2, chunk.attempt).BindInt(3, chunk.rank);
    ASSIGN_OR_RETURN(bool row, end.Step());
    const int64_t stored_end = row ? end.Int(0) : 0;
    if (chunk.offset > stored_end) {
      return absl::FailedPreconditionError(
          absl::StrCat("log chunk at offset ", chunk.offset,
                       " leaves a gap; stored log ends at ", stored_end));
    }
    if (chunk.offset + static_cast<int64_t>(chunk.data.size()) <= stored_end) {
      return absl::OkStatus();  // already stored (a retried chunk)
    }
    // Keep only the part past what is stored, so chunks never overlap.
    const int64_t skip = stored_end - chunk.offset;
    ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertLog));
    RETURN_IF_ERROR(Statement(db_.get(), insert)
                        .BindInt(1, chunk.job_id)
                        .BindInt(2, chunk.attempt)
                        .BindInt(3, chunk.rank)
                        .BindInt(4, stored_end)
                        .BindBlob(5, absl::string_view(chunk.data).substr(skip))
                        .Run());
  }
  return txn.Commit();
}

absl::StatusOr<int64_t> SqliteStore::LogEnd(int64_t job_id, int32_t attempt,
                                            int32_t rank) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * end_stmt, Prepare(kLogEnd));
  Statement end(db_.get(), end_stmt);
  end.BindInt(1, job_id).BindInt(2, attempt).BindInt(3, rank);
  ASSIGN_OR_RETURN(bool row, end.Step());
  return row ? end.Int(0) : 0;
}

absl::StatusOr<std::string> SqliteStore::ReadLog(int64_t job_id, int32_t attempt,
                                                 int32_t rank, int64_t from_offset,
                                                 int64_t max_bytes) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kReadLog));
  Statement rows(db_.get(), select);
  rows.BindInt(1, job_id).BindInt(2, attempt).BindInt(3, rank).BindInt(4, from_offset);
  std::string out;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    const int64_t offset = rows.Int(0);
    std::string data = rows.Bytes(1);
    const int64_t skip = std::max<int64_t>(0, from_offset - offset);
    out.append(data, static_cast<size_t>(skip));
    if (static_cast<int64_t>(out.size()) >= max_bytes) {
      out.resize(static_cast<size_t>(max_bytes));
      break;
    }
  }
  return out;
}

absl::Status SqliteStore::AppendMetrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertMetric));
    Statement statement(db_.get(), insert);
    for (const MetricRow& metric : rows) {
      statement.Reset();
      RETURN_IF_ERROR(statement.BindInt(1, metric.job_id)
                          .BindInt(2, metric.attempt)
                          .BindInt(3, metric.rank)
                          .BindInt(4, metric.step)
                          .BindText(5, metric.name)
                          .BindDouble(6, metric.value)
                          .BindInt(7, metric.unix_ms)
                          .Run());
    }
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<MetricRow>> SqliteStore::QueryMetrics(
    const MetricQuery& query) {
  if (query.limit <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric query limit must be positive, got ", query.limit));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kQueryMetrics));
  Statement rows(db_.get(), select);
  rows.BindInt(1, query.job_id)
      .BindInt(2, query.after_step)
      .BindText(3, query.name)
      .BindInt(4, query.limit);
  return ReadAll(rows, &ReadMetric);
}

absl::StatusOr<int> SqliteStore::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSchemaVersion));
  Statement row(db_.get(), select);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::InternalError("schema_version query returned no row");
  return static_cast<int>(row.Int(0));
}

absl::StatusOr<std::string> SqliteStore::JournalMode() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kJournalMode));
  Statement row(db_.get(), select);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::InternalError("journal_mode query returned no row");
  return row.Bytes(0);
}

absl::StatusOr<int> SqliteStore::SynchronousLevel() {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(), "PRAGMA synchronous", -1, &raw, nullptr);
  StatementHandle stmt(raw);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "PRAGMA synchronous");
  if (sqlite3_step(raw) != SQLITE_ROW) return absl::InternalError("no synchronous row");
  return sqlite3_column_int(raw, 0);
}

}  // namespace tessera
