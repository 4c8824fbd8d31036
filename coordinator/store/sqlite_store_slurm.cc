// SqliteStore's slurm_allocations table: the Slurm allocations the
// coordinator submitted and has not yet seen end (see
// coordinator/core/slurm/slurm_pool_manager.h). Commits with
// synchronous=FULL: an allocation holds cluster nodes, and a restarted
// coordinator must find it to give them back.
#include <sqlite3.h>

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
constexpr char kPutSlurmAllocation[] =
    "INSERT OR REPLACE INTO slurm_allocations (slurm_job_id, pool, job_id, owner, "
    "submitted_as, nodes, state, cancel_sent, credential_path, credential_id, "
    "submitted_ms, running_since_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
constexpr char kDeleteSlurmAllocation[] =
    "DELETE FROM slurm_allocations WHERE slurm_job_id = ?1";
constexpr char kListSlurmAllocations[] =
    "SELECT slurm_job_id, pool, job_id, owner, submitted_as, nodes, state, "
    "cancel_sent, credential_path, credential_id, submitted_ms, running_since_ms "
    "FROM slurm_allocations ORDER BY submitted_ms, slurm_job_id";

absl::StatusOr<SlurmAllocationRecord> ReadSlurmAllocation(const Statement& row) {
  SlurmAllocationRecord a;
  a.slurm_job_id = row.Bytes(0);
  a.pool = row.Bytes(1);
  a.job_id = row.Int(2);
  a.owner = row.Bytes(3);
  a.submitted_as = row.Bytes(4);
  a.nodes = static_cast<int32_t>(row.Int(5));
  a.state = row.Bytes(6);
  a.cancel_sent = row.Int(7) != 0;
  a.credential_path = row.Bytes(8);
  a.credential_id = row.Int(9);
  a.submitted_unix_ms = row.Int(10);
  a.running_since_unix_ms = row.Int(11);
  return a;
}

}  // namespace

absl::Status SqliteStore::PutSlurmAllocation(const SlurmAllocationRecord& a) {
  if (a.slurm_job_id.empty()) {
    return absl::InvalidArgumentError("a Slurm allocation needs its Slurm job id");
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * put, Prepare(kPutSlurmAllocation));
  return Statement(db_.get(), put)
      .BindText(1, a.slurm_job_id)
      .BindText(2, a.pool)
      .BindInt(3, a.job_id)
      .BindText(4, a.owner)
      .BindText(5, a.submitted_as)
      .BindInt(6, a.nodes)
      .BindText(7, a.state)
      .BindInt(8, a.cancel_sent ? 1 : 0)
      .BindText(9, a.credential_path)
      .BindInt(10, a.credential_id)
      .BindInt(11, a.submitted_unix_ms)
      .BindInt(12, a.running_since_unix_ms)
      .Run();
}

absl::Status SqliteStore::DeleteSlurmAllocation(const std::string& slurm_job_id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * del, Prepare(kDeleteSlurmAllocation));
  return Statement(db_.get(), del).BindText(1, slurm_job_id).Run();
}

absl::StatusOr<std::vector<SlurmAllocationRecord>> SqliteStore::ListSlurmAllocations() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListSlurmAllocations));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadSlurmAllocation);
}

}  // namespace tessera
