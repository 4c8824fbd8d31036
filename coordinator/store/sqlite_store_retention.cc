// SqliteStore's part in database retention (db_retention.h): finished jobs'
// outputs listed, downsampled, thinned and dropped (the job_retention table
// keeps what was done), the file's size in pages, incremental vacuum, and the
// figures `tessera-coordinator db stats` prints. Deletes run in transactions
// of about kDeleteBatch rows, so the store writer's commits go on between
// them.
//
// Thinning and dropping for the size budget rewrite the steps they cut: the
// metrics table is clustered by (job, step, ...), and a delete of most but not
// all of a page's rows frees no page (SQLite merges a page only once it is
// under a third full), so the kept rows of a run of steps are read, the run
// deleted, and the kept rows written back densely.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/store/metric_downsampling.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/sqlite_util.h"

namespace tessera {
namespace {

using sqlite_internal::BindMetric;
using sqlite_internal::kInsertMetric;
using sqlite_internal::ReadAll;
using sqlite_internal::ReadMetric;
using sqlite_internal::SqliteError;
using sqlite_internal::Statement;

constexpr size_t kDeleteBatch = 10000;

// job_retention's marks. metrics is a set of these bits; what was stored
// before thinning existed (1, or 2 once all metrics were dropped) reads the
// same.
constexpr int kMetricsDownsampled = 1;
constexpr int kMetricsDropped = 2;  // all but the kept metrics
constexpr int kMetricsThinned = 4;
constexpr int kLogsDropped = 1;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kListFinished[] =
    "SELECT j.id, j.state, j.updated_ms, COALESCE(r.metrics, 0), COALESCE(r.logs, 0) "
    "FROM jobs j LEFT JOIN job_retention r ON r.job_id = j.id "
    "WHERE j.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') "
    "AND ((COALESCE(r.metrics, 0) & 2) = 0 OR COALESCE(r.logs, 0) < 1) "
    "ORDER BY j.updated_ms, j.id";
constexpr char kJobState[] = "SELECT state FROM jobs WHERE id = ?1";
constexpr char kMetricKeys[] =
    "SELECT attempt, rank, name, step FROM metrics WHERE job_id = ?1";
constexpr char kDeleteMetricPoint[] =
    "DELETE FROM metrics WHERE job_id = ?1 AND step = ?2 AND rank = ?3 AND name = ?4 "
    "AND attempt = ?5";
constexpr char kSeriesEnds[] =
    "SELECT attempt, rank, name, MAX(step) FROM metrics WHERE job_id = ?1 "
    "GROUP BY attempt, rank, name";
// The last step of the kDeleteBatch rows from step ?2 on (whole steps), or of
// all that are left; NULL past the job's last step.
constexpr char kStepsBatchEnd[] =
    "SELECT MAX(step) FROM (SELECT step FROM metrics WHERE job_id = ?1 AND step >= ?2 "
    "ORDER BY step LIMIT ?3)";
constexpr char kMetricsInSteps[] =
    "SELECT job_id, attempt, rank, step, name, value, time_ms FROM metrics "
    "WHERE job_id = ?1 AND step BETWEEN ?2 AND ?3";
constexpr char kDeleteMetricsInSteps[] =
    "DELETE FROM metrics WHERE job_id = ?1 AND step BETWEEN ?2 AND ?3";
constexpr char kDeleteLogs[] = "DELETE FROM logs WHERE job_id = ?1";
constexpr char kMark[] =
    "INSERT INTO job_retention (job_id, metrics, logs, updated_ms) "
    "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id) DO UPDATE SET "
    "metrics = metrics | excluded.metrics, logs = MAX(logs, excluded.logs), "
    "updated_ms = excluded.updated_ms";
constexpr char kRetentionEvent[] =
    "INSERT INTO events (job_id, time_ms, from_state, to_state, reason) "
    "SELECT id, ?2, state, state, ?3 FROM jobs WHERE id = ?1";

absl::StatusOr<FinishedJobOutputs> ReadFinished(const Statement& row) {
  FinishedJobOutputs job;
  job.job_id = row.Int(0);
  if (!v1::JobState_Parse(absl::StrCat("JOB_STATE_", row.Bytes(1)), &job.state)) {
    return absl::DataLossError(absl::StrCat("stored state of job ", job.job_id,
                                            " is unknown: '", row.Bytes(1), "'"));
  }
  job.ended_unix_ms = row.Int(2);
  job.metrics_downsampled = (row.Int(3) & kMetricsDownsampled) != 0;
  job.metrics_thinned = (row.Int(3) & kMetricsThinned) != 0;
  job.metrics_dropped = (row.Int(3) & kMetricsDropped) != 0;
  job.logs_dropped = row.Int(4) >= kLogsDropped;
  return job;
}

absl::StatusOr<MetricPointKey> ReadMetricKey(const Statement& row) {
  MetricPointKey key;
  key.attempt = static_cast<int32_t>(row.Int(0));
  key.rank = static_cast<int32_t>(row.Int(1));
  key.name = row.Bytes(2);
  key.step = row.Int(3);
  return key;
}

}  // namespace

absl::StatusOr<std::vector<FinishedJobOutputs>> SqliteStore::ListFinishedJobOutputs() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListFinished));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadFinished);
}

absl::Status SqliteStore::CheckFinished(int64_t job_id) {
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kJobState));
  Statement row(db_.get(), select);
  row.BindInt(1, job_id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (!v1::JobState_Parse(absl::StrCat("JOB_STATE_", row.Bytes(0)), &state) ||
      !IsTerminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", row.Bytes(0),
                     ": only a finished job's outputs are pruned"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::MarkRetained(int64_t job_id, int metrics, int logs,
                                       const RetentionNote& note) {
  ASSIGN_OR_RETURN(sqlite3_stmt * mark, Prepare(kMark));
  RETURN_IF_ERROR(Statement(db_.get(), mark)
                      .BindInt(1, job_id)
                      .BindInt(2, metrics)
                      .BindInt(3, logs)
                      .BindInt(4, note.unix_ms)
                      .Run());
  if (note.event.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(sqlite3_stmt * event, Prepare(kRetentionEvent));
  return Statement(db_.get(), event)
      .BindInt(1, job_id)
      .BindInt(2, note.unix_ms)
      .BindText(3, note.event)
      .Run();
}

absl::StatusOr<int64_t> SqliteStore::DeleteMetricPoints(
    int64_t job_id, const std::vector<MetricPointKey>& keys, size_t begin, size_t end) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  int64_t deleted = 0;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * del, Prepare(kDeleteMetricPoint));
    Statement statement(db_.get(), del);
    for (size_t i = begin; i < end; ++i) {
      statement.Reset();
      RETURN_IF_ERROR(statement.BindInt(1, job_id)
                          .BindInt(2, keys[i].step)
                          .BindInt(3, keys[i].rank)
                          .BindText(4, keys[i].name)
                          .BindInt(5, keys[i].attempt)
                          .Run());
      deleted += sqlite3_changes(db_.get());
    }
  }
  RETURN_IF_ERROR(txn.Commit());
  return deleted;
}

absl::StatusOr<int64_t> SqliteStore::DownsampleMetrics(int64_t job_id, int max_points,
                                                       const RetentionNote& note) {
  std::vector<MetricPointKey> keys;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckFinished(job_id));
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kMetricKeys));
    Statement rows(db_.get(), select);
    rows.BindInt(1, job_id);
    ASSIGN_OR_RETURN(keys, ReadAll(rows, &ReadMetricKey));
  }
  const std::vector<MetricPointKey> drop =
      MetricPointsToDrop(std::move(keys), max_points);
  int64_t deleted = 0;
  for (size_t begin = 0; begin < drop.size(); begin += kDeleteBatch) {
    ASSIGN_OR_RETURN(int64_t batch,
                     DeleteMetricPoints(job_id, drop, begin,
                                        std::min(drop.size(), begin + kDeleteBatch)));
    deleted += batch;
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  RETURN_IF_ERROR(MarkRetained(job_id, kMetricsDownsampled, 0, note));
  RETURN_IF_ERROR(txn.Commit());
  return deleted;
}

absl::StatusOr<std::optional<SqliteStore::MetricStepsCut>> SqliteStore::CutMetricSteps(
    int64_t job_id, int64_t from_step, SizeCut cut, const SeriesEnds& ends) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  int64_t last_step = 0;
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * end_stmt, Prepare(kStepsBatchEnd));
    Statement end(db_.get(), end_stmt);
    end.BindInt(1, job_id)
        .BindInt(2, from_step)
        .BindInt(3, static_cast<int64_t>(kDeleteBatch));
    ASSIGN_OR_RETURN(bool found, end.Step());
    if (!found || end.IsNull(0)) return std::nullopt;
    last_step = end.Int(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kMetricsInSteps));
  Statement rows(db_.get(), select);
  rows.BindInt(1, job_id).BindInt(2, from_step).BindInt(3, last_step);
  ASSIGN_OR_RETURN(std::vector<MetricRow> metrics, ReadAll(rows, &ReadMetric));
  std::vector<MetricRow> kept;
  for (MetricRow& metric : metrics) {
    const MetricPointKey key{metric.attempt, metric.rank, metric.name, metric.step};
    if (SizeCutKeeps(cut, key, ends)) kept.push_back(std::move(metric));
  }
  const MetricStepsCut done{.removed = static_cast<int64_t>(metrics.size() - kept.size()),
                            .next_step = last_step + 1};
  if (done.removed == 0) return done;  // nothing to give back: rolled back
  ASSIGN_OR_RETURN(sqlite3_stmt * del, Prepare(kDeleteMetricsInSteps));
  RETURN_IF_ERROR(Statement(db_.get(), del)
                      .BindInt(1, job_id)
                      .BindInt(2, from_step)
                      .BindInt(3, last_step)
                      .Run());
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertMetric));
  Statement statement(db_.get(), insert);
  for (const MetricRow& metric : kept) {
    statement.Reset();
    RETURN_IF_ERROR(BindMetric(statement, metric).Run());
  }
  RETURN_IF_ERROR(txn.Commit());
  return done;
}

absl::StatusOr<int64_t> SqliteStore::CutMetrics(int64_t job_id, SizeCut cut, int mark,
                                                const RetentionNote& note) {
  SeriesEnds ends;  // only thinning asks for them
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckFinished(job_id));
  }
  if (cut == SizeCut::kThin) {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSeriesEnds));
    Statement rows(db_.get(), select);
    rows.BindInt(1, job_id);
    ASSIGN_OR_RETURN(const std::vector<MetricPointKey> last,
                     ReadAll(rows, &ReadMetricKey));
    for (const MetricPointKey& key : last) {
      ends[{key.attempt, key.rank, key.name}] = key.step;
    }
  }
  int64_t removed = 0;
  int64_t from_step = std::numeric_limits<int64_t>::min();
  for (;;) {
    ASSIGN_OR_RETURN(const std::optional<MetricStepsCut> steps,
                     CutMetricSteps(job_id, from_step, cut, ends));
    if (!steps.has_value()) break;
    removed += steps->removed;
    from_step = steps->next_step;
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  RETURN_IF_ERROR(MarkRetained(job_id, mark, 0, note));
  RETURN_IF_ERROR(txn.Commit());
  return removed;
}

absl::StatusOr<int64_t> SqliteStore::ThinMetrics(int64_t job_id,
                                                 const RetentionNote& note) {
  return CutMetrics(job_id, SizeCut::kThin, kMetricsThinned, note);
}

absl::StatusOr<int64_t> SqliteStore::DropMetrics(int64_t job_id,
                                                 const RetentionNote& note) {
  return CutMetrics(job_id, SizeCut::kDrop, kMetricsDropped, note);
}

absl::StatusOr<int64_t> SqliteStore::DropLogs(int64_t job_id, const RetentionNote& note) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFinished(job_id));
  RETURN_IF_ERROR(SetDurability(/*full=*/false));
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * del, Prepare(kDeleteLogs));
  RETURN_IF_ERROR(Statement(db_.get(), del).BindInt(1, job_id).Run());
  const int64_t deleted = sqlite3_changes(db_.get());
  RETURN_IF_ERROR(MarkRetained(job_id, 0, kLogsDropped, note));
  RETURN_IF_ERROR(txn.Commit());
  return deleted;
}

absl::StatusOr<StoreSize> SqliteStore::SizeLocked() {
  auto pragma_int = [this](const char* sql) -> absl::StatusOr<int64_t> {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_.get(), sql, -1, &raw, nullptr);
    StatementHandle stmt(raw);
    if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, sql);
    Statement row(db_.get(), raw);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (!found) return absl::InternalError(absl::StrCat(sql, " returned no row"));
    return row.Int(0);
  };
  ASSIGN_OR_RETURN(int64_t page_size, pragma_int("PRAGMA page_size"));
  ASSIGN_OR_RETURN(int64_t pages, pragma_int("PRAGMA page_count"));
  ASSIGN_OR_RETURN(int64_t free_pages, pragma_int("PRAGMA freelist_count"));
  StoreSize size;
  size.file_bytes = pages * page_size;
  size.free_bytes = free_pages * page_size;
  struct stat wal {};
  if (is_file_ && ::stat((path_ + "-wal").c_str(), &wal) == 0) {
    size.wal_bytes = static_cast<int64_t>(wal.st_size);
  }
  return size;
}

absl::StatusOr<StoreSize> SqliteStore::GetStoreSize() {
  absl::MutexLock lock(&mu_);
  return SizeLocked();
}

absl::Status SqliteStore::ReclaimSpace() {
  absl::MutexLock lock(&mu_);
  int rc =
      sqlite3_exec(db_.get(), "PRAGMA incremental_vacuum", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "PRAGMA incremental_vacuum");
  if (!is_file_) return absl::OkStatus();
  rc = sqlite3_wal_checkpoint_v2(db_.get(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr,
                                 nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "wal_checkpoint(TRUNCATE)");
  return absl::OkStatus();
}

absl::StatusOr<int> SqliteStore::AutoVacuumMode() {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(), "PRAGMA auto_vacuum", -1, &raw, nullptr);
  StatementHandle stmt(raw);
  if (rc != SQLITE_OK) return SqliteError(db_.get(), rc, "PRAGMA auto_vacuum");
  if (sqlite3_step(raw) != SQLITE_ROW) return absl::InternalError("no auto_vacuum row");
  return sqlite3_column_int(raw, 0);
}

}  // namespace tessera
