// SqliteStore's job state: the jobs table, the events table (each job's state
// transitions) and the ranks table (each attempt's ranks). All of it commits
// with synchronous=FULL.
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/sqlite_util.h"

namespace tessera {
namespace {

using sqlite_internal::ReadAll;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kFindJobByRequest[] = "SELECT id FROM jobs WHERE client_request_id = ?1";
constexpr char kInsertJob[] =
    "INSERT INTO jobs (name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
// The three job queries select the columns ReadJob() reads, in its order.
constexpr char kSelectJob[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner, "
    "preemptions, metrics_not_stored, log_lines_not_stored FROM jobs "
    "WHERE id "
    "= ?1";
constexpr char kListJobs[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner, "
    "preemptions, metrics_not_stored, log_lines_not_stored FROM jobs "
    "WHERE (?1 = '' OR state = ?1) AND (?2 = 0 OR sweep_id = ?2) AND (?4 = '' OR owner = "
    "?4) "
    "AND (?5 = 0 OR id < ?5) ORDER BY id DESC LIMIT ?3";
constexpr char kListActiveJobs[] =
    "SELECT id, name, state, reason, pending_reason, attempt, spec, spec_yaml, "
    "client_request_id, created_ms, updated_ms, sweep_id, sweep_point, owner, "
    "preemptions, metrics_not_stored, log_lines_not_stored FROM jobs "
    "WHERE state IN ('QUEUED', 'SCHEDULED', 'RUNNING') ORDER BY id";
constexpr char kSelectJobState[] = "SELECT state FROM jobs WHERE id = ?1";
constexpr char kUpdateJob[] =
    "UPDATE jobs SET state = ?2, reason = ?3, pending_reason = ?4, attempt = ?5, "
    "updated_ms = ?6, preemptions = ?7, metrics_not_stored = ?8, log_lines_not_stored = "
    "?9 "
    "WHERE id = ?1";
constexpr char kInsertEvent[] =
    "INSERT INTO events (job_id, time_ms, from_state, to_state, reason) "
    "VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr char kListEvents[] =
    "SELECT job_id, time_ms, from_state, to_state, reason FROM events "
    "WHERE job_id = ?1 ORDER BY seq";

constexpr char kPutRank[] =
    "INSERT OR REPLACE INTO ranks (job_id, attempt, rank, worker, slot, state, pid, "
    "exit_code, signal, has_result, param_hash, test_accuracy, test_loss, exit_reason, "
    "eval_result) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
constexpr char kGetRanks[] =
    "SELECT job_id, attempt, rank, worker, slot, state, pid, exit_code, signal, "
    "has_result, param_hash, test_accuracy, test_loss, exit_reason, eval_result "
    "FROM ranks WHERE job_id = ?1 AND attempt = ?2 ORDER BY rank";

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
  job.preemptions = static_cast<int32_t>(row.Int(14));
  job.metrics_not_stored = row.Int(15);
  job.log_lines_not_stored = row.Int(16);
  return job;
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
  rank.eval_result = row.Bytes(14);
  return rank;
}

}  // namespace

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
      .BindInt(3, filter.limit > 0 ? filter.limit : -1)
      .BindText(4, filter.owner)
      .BindInt(5, filter.before_id);
  return ReadAll(rows, &ReadJob);
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
                      .BindInt(7, job.preemptions)
                      .BindInt(8, job.metrics_not_stored)
                      .BindInt(9, job.log_lines_not_stored)
                      .Run());
  if (old_state != state || !job.event.empty()) {
    ASSIGN_OR_RETURN(sqlite3_stmt * event, Prepare(kInsertEvent));
    RETURN_IF_ERROR(Statement(db, event)
                        .BindInt(1, job.id)
                        .BindInt(2, job.updated_unix_ms)
                        .BindText(3, old_state)
                        .BindText(4, state)
                        .BindText(5, job.event.empty() ? job.reason : job.event)
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
                          .BindBlob(15, rank.eval_result)
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

}  // namespace tessera
