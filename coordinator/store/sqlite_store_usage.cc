// SqliteStore's usage figures: each user's fair-share usage (the usage table)
// and what one job has stored, for the per-job limits.
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/sqlite_util.h"

namespace tessera {
namespace {

using sqlite_internal::ReadAll;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kPutUsage[] =
    "INSERT INTO usage (user, slot_seconds, updated_ms) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (user) DO UPDATE SET slot_seconds = ?2, updated_ms = ?3";
constexpr char kListUsage[] =
    "SELECT user, slot_seconds, updated_ms FROM usage ORDER BY user";
constexpr char kCountMetricRows[] = "SELECT COUNT(*) FROM metrics WHERE job_id = ?1";
constexpr char kMetricNames[] = "SELECT DISTINCT name FROM metrics WHERE job_id = ?1";
constexpr char kLogBytes[] =
    "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM logs WHERE job_id = ?1";

absl::StatusOr<UsageRecord> ReadUsage(const Statement& row) {
  return UsageRecord{row.Bytes(0), row.Double(1), row.Int(2)};
}

}  // namespace

absl::Status SqliteStore::PutUsage(const std::vector<UsageRecord>& usage) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  for (const UsageRecord& u : usage) {
    ASSIGN_OR_RETURN(sqlite3_stmt * put, Prepare(kPutUsage));
    RETURN_IF_ERROR(Statement(db_.get(), put)
                        .BindText(1, u.user)
                        .BindDouble(2, u.slot_seconds)
                        .BindInt(3, u.updated_unix_ms)
                        .Run());
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<UsageRecord>> SqliteStore::ListUsage() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListUsage));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadUsage);
}

absl::StatusOr<JobOutputUsage> SqliteStore::GetJobOutputUsage(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  JobOutputUsage usage;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * count, Prepare(kCountMetricRows));
    Statement row(db_.get(), count);
    row.BindInt(1, job_id);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (found) usage.metric_rows = row.Int(0);
  }
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * names, Prepare(kMetricNames));
    Statement rows(db_.get(), names);
    rows.BindInt(1, job_id);
    for (;;) {
      ASSIGN_OR_RETURN(bool found, rows.Step());
      if (!found) break;
      usage.metric_names.push_back(rows.Bytes(0));
    }
  }
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * bytes, Prepare(kLogBytes));
    Statement row(db_.get(), bytes);
    row.BindInt(1, job_id);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (found) usage.log_bytes = row.Int(0);
  }
  return usage;
}

}  // namespace tessera
