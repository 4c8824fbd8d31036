// SqliteStore's connection: Open() and its pragmas, the statement cache,
// transactions and durability, and the introspection the tests use. Schema
// migrations are in sqlite_schema.cc; the Store methods, one file per table
// family, in sqlite_store_*.cc.
#include "coordinator/store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_util.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

using sqlite_internal::SqliteError;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kBeginRead[] = "BEGIN";
constexpr char kBeginWrite[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";
constexpr char kJournalMode[] = "PRAGMA journal_mode";

}  // namespace

void SqliteStore::DbCloser::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

void SqliteStore::StatementFinalizer::operator()(sqlite3_stmt* stmt) const {
  sqlite3_finalize(stmt);
}

SqliteStore::SqliteStore(DbHandle db) : db_(std::move(db)) {}

SqliteStore::~SqliteStore() = default;

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  return Open(path, Options());
}

absl::Status SqliteStore::CheckFileModes(const std::string& path) {
  if (path == ":memory:" || path.empty()) return absl::OkStatus();
  // A new database is created for its owner only; SQLite gives the -wal and
  // -shm files the database's mode.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  // Not there and not creatable (say, a missing directory): SQLite's open
  // reports that below.
  if (fd < 0) return absl::OkStatus();
  struct stat st {};
  const int stat_rc = ::fstat(fd, &st);
  ::close(fd);
  if (stat_rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat database ", path, ": ", std::strerror(errno)));
  }
  // It holds the trainer-credential key and the TLS private key.
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    struct stat fs {};
    if (::stat(file.c_str(), &fs) != 0) continue;
    if ((fs.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o",
                    static_cast<unsigned>(fs.st_mode & 07777));
      return absl::FailedPreconditionError(absl::StrCat(
          file, " is readable or writable by group or others (mode ", mode,
          "); it holds the coordinator's signing and TLS keys: run 'chmod 600 ", path,
          "*' and rotate the keys (new database) if others may have read it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               const Options& options) {
  RETURN_IF_ERROR(CheckFileModes(path));
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
  if (options.incremental_vacuum) store->EnableIncrementalVacuum();
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
  // Takes effect only before the first table is made; an older file is
  // switched by EnableIncrementalVacuum after the migrations.
  if (options.incremental_vacuum) {
    RETURN_IF_ERROR(pragma("PRAGMA auto_vacuum = INCREMENTAL").status());
  }
  if (path != ":memory:") {
    ASSIGN_OR_RETURN(std::string mode, pragma("PRAGMA journal_mode = WAL"));
    if (mode != "wal") {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot use WAL journal mode for ", path, ": SQLite chose '", mode, "'"));
    }
    RETURN_IF_ERROR(pragma("PRAGMA synchronous = NORMAL").status());
    is_file_ = true;
    sync_full_ = false;
    path_ = path;
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

void SqliteStore::EnableIncrementalVacuum() {
  sqlite3* db = db_.get();
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA auto_vacuum", -1, &raw, nullptr);
  StatementHandle mode(raw);
  if (rc != SQLITE_OK || sqlite3_step(raw) != SQLITE_ROW) return;
  if (sqlite3_column_int(raw, 0) == 2) return;
  mode.reset();
  spdlog::info(
      "switching the database {} to incremental auto-vacuum (once; it is rewritten, "
      "which needs free space about its size)",
      path_.empty() ? std::string(":memory:") : path_);
  rc = sqlite3_exec(db, "PRAGMA auto_vacuum = INCREMENTAL; VACUUM", nullptr, nullptr,
                    nullptr);
  if (rc != SQLITE_OK) {
    spdlog::warn(
        "cannot switch the database to incremental auto-vacuum ({}): retention still "
        "frees pages for reuse, but the file does not shrink until a later start "
        "succeeds",
        SqliteError(db, rc, "VACUUM").ToString());
  }
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

absl::StatusOr<DiskSpace> SqliteStore::GetDiskSpace() {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    path = path_;
  }
  if (path.empty()) return DiskSpace{};
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) {
    return absl::InternalError(
        absl::StrCat("statvfs ", path, ": ", std::strerror(errno)));
  }
  return DiskSpace{static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize),
                   static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize)};
}

absl::Status SqliteStore::CompactJournal() {
  absl::MutexLock lock(&mu_);
  if (!is_file_) return absl::OkStatus();
  int rc = sqlite3_wal_checkpoint_v2(db_.get(), nullptr, SQLITE_CHECKPOINT_TRUNCATE,
                                     nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "wal_checkpoint(TRUNCATE)");
  return absl::OkStatus();
}

absl::Status SqliteStore::LimitJournal(int64_t bytes) {
  // SQLite's default: a checkpoint once the WAL holds 1,000 pages.
  constexpr int64_t kDefaultCheckpointPages = 1000;
  absl::MutexLock lock(&mu_);
  if (!is_file_) return absl::OkStatus();
  sqlite3* db = db_.get();
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &raw, nullptr);
  StatementHandle page_size(raw);
  if (rc != SQLITE_OK) return SqliteError(db, rc, "PRAGMA page_size");
  if (sqlite3_step(raw) != SQLITE_ROW) return absl::InternalError("no page_size row");
  const int64_t page_bytes = std::max<int64_t>(1, sqlite3_column_int64(raw, 0));
  const int64_t pages =
      std::clamp<int64_t>(bytes / page_bytes, 1, kDefaultCheckpointPages);
  const std::string pragmas =
      absl::StrCat("PRAGMA wal_autocheckpoint = ", pages,
                   "; PRAGMA journal_size_limit = ", pages * page_bytes);
  rc = sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, pragmas);
  return absl::OkStatus();
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
