// SqliteStore's workers table: one row per worker daemon, replaced on every
// registration and heartbeat. Commits with synchronous=FULL.
#include <sqlite3.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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
constexpr char kUpsertWorker[] =
    "INSERT OR REPLACE INTO workers (name, hostname, slots, device_kind, epoch, "
    "last_seen_ms, pool, slurm_job_id, admin_drain, admin_drain_deadline_ms, gpu_ids) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
constexpr char kListWorkers[] =
    "SELECT name, hostname, slots, device_kind, epoch, last_seen_ms, pool, slurm_job_id, "
    "admin_drain, admin_drain_deadline_ms, gpu_ids FROM workers "
    "ORDER BY name";

absl::StatusOr<WorkerRecord> ReadWorker(const Statement& row) {
  WorkerRecord worker;
  worker.name = row.Bytes(0);
  worker.hostname = row.Bytes(1);
  worker.slots = static_cast<int32_t>(row.Int(2));
  worker.device_kind = row.Bytes(3);
  worker.epoch = row.Int(4);
  worker.last_seen_unix_ms = row.Int(5);
  worker.pool = row.Bytes(6);
  worker.slurm_job_id = row.Bytes(7);
  worker.admin_drain = row.Bytes(8);
  worker.admin_drain_deadline_unix_ms = row.Int(9);
  worker.gpu_ids = absl::StrSplit(row.Bytes(10), ',', absl::SkipEmpty());
  return worker;
}

}  // namespace

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
      .BindText(7, worker.pool)
      .BindText(8, worker.slurm_job_id)
      .BindText(9, worker.admin_drain)
      .BindInt(10, worker.admin_drain_deadline_unix_ms)
      .BindText(11, absl::StrJoin(worker.gpu_ids, ","))
      .Run();
}

absl::StatusOr<std::vector<WorkerRecord>> SqliteStore::ListWorkers() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListWorkers));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadWorker);
}

}  // namespace tessera
