// SqliteStore's sweeps table: scaling studies. A sweep's points are jobs whose
// sweep_id names it (sqlite_store_jobs.cc). Commits with synchronous=FULL.
#include <sqlite3.h>

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

using sqlite_internal::ReadAll;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
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

// Sweep states are stored as the SweepState name without this prefix
// ("RUNNING").
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

}  // namespace

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

}  // namespace tessera
