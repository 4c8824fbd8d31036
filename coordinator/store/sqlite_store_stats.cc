// SqliteStore::GetStoreStats: what `tessera-coordinator db stats` prints (sizes
// per table, the oldest kept data, what retention has done). Run rarely, by an
// operator, so its statements are prepared each time rather than cached.
#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

using StatementOwner = std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)>;

// The first row of `sql` (with ?1 bound to `arg` when it has a parameter) as
// integers; empty when it has no row.
absl::StatusOr<std::vector<int64_t>> FirstRow(sqlite3* db, const std::string& sql,
                                              int64_t arg = 0) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr);
  StatementOwner owner(raw, &sqlite3_finalize);
  if (rc != SQLITE_OK) return SqliteError(db, rc, sql);
  Statement row(db, raw);
  if (sqlite3_bind_parameter_count(raw) > 0) row.BindInt(1, arg);
  ASSIGN_OR_RETURN(bool found, row.Step());
  std::vector<int64_t> values;
  for (int i = 0; found && i < sqlite3_column_count(raw); ++i) {
    values.push_back(row.Int(i));
  }
  return values;
}

// Each table's name and a number from `sql`'s rows (name, number).
absl::StatusOr<std::map<std::string, int64_t>> NamedInts(sqlite3* db, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  StatementOwner owner(raw, &sqlite3_finalize);
  if (rc != SQLITE_OK) return SqliteError(db, rc, sql);
  Statement row(db, raw);
  std::map<std::string, int64_t> values;
  for (;;) {
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (!found) return values;
    values[row.Bytes(0)] = row.Int(1);
  }
}

std::string AutoVacuumName(int64_t mode) {
  switch (mode) {
    case 0:
      return "none";
    case 1:
      return "full";
    case 2:
      return "incremental";
    default:
      return absl::StrCat("mode ", mode);
  }
}

}  // namespace

absl::Status SqliteStore::AddTableStats(StoreStats& stats) {
  sqlite3* db = db_.get();
  using NameToInt = std::map<std::string, int64_t>;
  ASSIGN_OR_RETURN(NameToInt tables,
                   NamedInts(db,
                             "SELECT name, 0 FROM sqlite_schema WHERE type = 'table' "
                             "AND name NOT LIKE 'sqlite_%'"));
  // dbstat is an optional part of SQLite: without it sizes stay unknown.
  absl::StatusOr<NameToInt> bytes = NamedInts(
      db,
      "SELECT s.tbl_name, SUM(d.pgsize) FROM dbstat d JOIN sqlite_schema s ON s.name = "
      "d.name GROUP BY s.tbl_name");
  for (const auto& [name, unused] : tables) {
    ASSIGN_OR_RETURN(std::vector<int64_t> count,
                     FirstRow(db, absl::StrCat("SELECT COUNT(*) FROM \"", name, "\"")));
    StoreStats::Table table{name, count.empty() ? 0 : count[0], -1};
    if (bytes.ok()) {
      auto it = bytes->find(name);
      table.bytes = it == bytes->end() ? 0 : it->second;
    }
    stats.tables.push_back(table);
  }
  std::sort(stats.tables.begin(), stats.tables.end(),
            [](const StoreStats::Table& a, const StoreStats::Table& b) {
              return a.bytes != b.bytes ? a.bytes > b.bytes : a.rows > b.rows;
            });
  return absl::OkStatus();
}

absl::Status SqliteStore::AddOldestKept(StoreStats& stats) {
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(std::vector<int64_t> job,
                   FirstRow(db, "SELECT id, created_ms FROM jobs ORDER BY id LIMIT 1"));
  if (job.size() == 2) {
    stats.oldest_job = job[0];
    stats.oldest_job_unix_ms = job[1];
  }
  ASSIGN_OR_RETURN(
      std::vector<int64_t> metrics,
      FirstRow(db, "SELECT job_id FROM metrics ORDER BY job_id, step LIMIT 1"));
  if (!metrics.empty()) {
    stats.oldest_metrics_job = metrics[0];
    ASSIGN_OR_RETURN(
        std::vector<int64_t> time,
        FirstRow(db, "SELECT MIN(time_ms) FROM metrics WHERE job_id = ?1", metrics[0]));
    if (!time.empty()) stats.oldest_metrics_unix_ms = time[0];
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> logs,
                   FirstRow(db,
                            "SELECT l.job_id, j.created_ms FROM logs l JOIN jobs j ON "
                            "j.id = l.job_id ORDER BY l.job_id LIMIT 1"));
  if (logs.size() == 2) {
    stats.oldest_logs_job = logs[0];
    stats.oldest_logs_unix_ms = logs[1];
  }
  ASSIGN_OR_RETURN(
      std::vector<int64_t> marks,
      FirstRow(db,
               "SELECT COALESCE(SUM((metrics & 1) != 0), 0), COALESCE(SUM((metrics "
               "& 4) != 0), 0), COALESCE(SUM((metrics & 2) != 0), 0), "
               "COALESCE(SUM(logs = 1), 0) FROM job_retention"));
  if (marks.size() == 4) {
    stats.jobs_metrics_downsampled = marks[0];
    stats.jobs_metrics_thinned = marks[1];
    stats.jobs_metrics_dropped = marks[2];
    stats.jobs_logs_dropped = marks[3];
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreStats> SqliteStore::GetStoreStats() {
  absl::MutexLock lock(&mu_);
  StoreStats stats;
  ASSIGN_OR_RETURN(stats.size, SizeLocked());
  ASSIGN_OR_RETURN(std::vector<int64_t> mode, FirstRow(db_.get(), "PRAGMA auto_vacuum"));
  stats.auto_vacuum = mode.empty() ? "unknown" : AutoVacuumName(mode[0]);
  RETURN_IF_ERROR(AddTableStats(stats));
  RETURN_IF_ERROR(AddOldestKept(stats));
  return stats;
}

}  // namespace tessera
