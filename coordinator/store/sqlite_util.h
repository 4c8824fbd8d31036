// SQLite helpers shared by SqliteStore's source files (sqlite_store*.cc,
// sqlite_schema.cc) and by nothing else: the mapping of SQLite result codes to
// statuses, Statement (bind, step and read one cached prepared statement),
// ReadAll, and the definition of SqliteStore::Transaction. Internal to the
// tessera_coordinator_store target; this header includes sqlite3.h, so code
// outside coordinator/store must not include it.
//
// Thread-safety: none of its own. A Statement or Transaction works on the
// store's one connection and its cached statements, so it may be created and
// used only while the store's mutex is held, and must not outlive that.
#ifndef TESSERA_COORDINATOR_STORE_SQLITE_UTIL_H_
#define TESSERA_COORDINATOR_STORE_SQLITE_UTIL_H_

#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_store.h"

namespace tessera {
namespace sqlite_internal {

// Maps a SQLite result code to a status whose code says what the caller can do
// about it, keeping SQLite's message.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what);

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

// A row of the metrics table, shared by its writes and reads
// (sqlite_store_metrics_logs.cc) and retention's rewrite
// (sqlite_store_retention.cc): kInsertMetric's parameters bound from `metric`,
// and a row read from a SELECT of its columns in that order.
inline constexpr char kInsertMetric[] =
    "INSERT OR IGNORE INTO metrics (job_id, attempt, rank, step, name, value, time_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
Statement& BindMetric(Statement& statement, const MetricRow& metric);
absl::StatusOr<MetricRow> ReadMetric(const Statement& row);

}  // namespace sqlite_internal

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
      sqlite_internal::Statement(db_, rollback_).Run().IgnoreError();
    }
  }

  absl::Status Commit() {
    sqlite3* db = std::exchange(db_, nullptr);
    absl::Status status = sqlite_internal::Statement(db, commit_).Run();
    if (!status.ok() && sqlite3_get_autocommit(db) == 0) {
      sqlite_internal::Statement(db, rollback_).Run().IgnoreError();
    }
    return status;
  }

 private:
  sqlite3* db_;  // Not owned; nullptr once committed or moved from.
  sqlite3_stmt* commit_;
  sqlite3_stmt* rollback_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_SQLITE_UTIL_H_
