// SqliteStore's rank output: the logs table (each rank's output, as chunks at
// byte offsets) and the metrics table. Both commit with synchronous=NORMAL,
// which on power loss can lose the last commits but never corrupts the file.
#include <sqlite3.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/sqlite_util.h"

namespace tessera {
namespace {

using sqlite_internal::BindMetric;
using sqlite_internal::kInsertMetric;
using sqlite_internal::ReadAll;
using sqlite_internal::ReadMetric;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kInsertLog[] =
    "INSERT OR IGNORE INTO logs (job_id, attempt, rank, offset, data) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr char kReadLog[] =
    "SELECT offset, data FROM logs WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3 "
    "AND offset + length(data) > ?4 ORDER BY offset";
constexpr char kLogEnd[] =
    "SELECT COALESCE(MAX(offset + length(data)), 0) FROM logs "
    "WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3";

// attempt breaks ties when a restarted attempt reports a step again.
constexpr char kQueryMetrics[] =
    "SELECT job_id, attempt, rank, step, name, value, time_ms FROM metrics "
    "WHERE job_id = ?1 AND step > ?2 AND (?3 = '' OR name = ?3) "
    "ORDER BY step, rank, name, attempt LIMIT ?4";

}  // namespace

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
      RETURN_IF_ERROR(BindMetric(statement, metric).Run());
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

}  // namespace tessera
