// SqliteStore's searches and search_jobs tables: hyperparameter searches and
// one row per job of their trials (trial, rung). Commits with
// synchronous=FULL: a search's rows are its state, like a job's.
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
constexpr char kFindSearchByRequest[] =
    "SELECT id FROM searches WHERE client_request_id = ?1";
constexpr char kInsertSearch[] =
    "INSERT INTO searches (name, state, reason, spec, spec_yaml, client_request_id, "
    "created_ms, updated_ms, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
// The two search queries select the columns ReadSearch() reads, in its order.
constexpr char kSelectSearch[] =
    "SELECT id, name, state, reason, spec, spec_yaml, client_request_id, created_ms, "
    "updated_ms, owner FROM searches WHERE id = ?1";
constexpr char kListSearches[] =
    "SELECT id, name, state, reason, spec, spec_yaml, client_request_id, created_ms, "
    "updated_ms, owner FROM searches ORDER BY id DESC";
constexpr char kUpdateSearch[] =
    "UPDATE searches SET state = ?2, reason = ?3, updated_ms = ?4 WHERE id = ?1";
constexpr char kSearchExists[] = "SELECT 1 FROM searches WHERE id = ?1";
constexpr char kPutSearchJob[] =
    "INSERT OR REPLACE INTO search_jobs (search_id, trial, rung, job_id, outcome, "
    "job_state, has_metric, metric, steps, reason, updated_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
constexpr char kListSearchJobs[] =
    "SELECT search_id, trial, rung, job_id, outcome, job_state, has_metric, metric, "
    "steps, reason, updated_ms FROM search_jobs WHERE search_id = ?1 "
    "ORDER BY trial, rung";

// Search states are stored as the SearchState name without this prefix
// ("RUNNING").
constexpr absl::string_view kSearchStatePrefix = "SEARCH_STATE_";

absl::StatusOr<std::string> SearchStateText(v1::SearchState state) {
  if (!v1::SearchState_IsValid(state) || state == v1::SEARCH_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("search state ", static_cast<int>(state), " is not a SearchState"));
  }
  absl::string_view name = v1::SearchState_Name(state);
  name.remove_prefix(kSearchStatePrefix.size());
  return std::string(name);
}

absl::StatusOr<SearchRecord> ReadSearch(const Statement& row) {
  SearchRecord search;
  search.id = row.Int(0);
  search.name = row.Bytes(1);
  const std::string state = row.Bytes(2);
  if (!v1::SearchState_Parse(absl::StrCat(kSearchStatePrefix, state), &search.state)) {
    return absl::DataLossError(
        absl::StrCat("stored search state '", state, "' is unknown"));
  }
  search.reason = row.Bytes(3);
  if (!search.spec.ParseFromString(row.Bytes(4))) {
    return absl::DataLossError(
        absl::StrCat("stored spec of search ", search.id, " is corrupt"));
  }
  search.spec_yaml = row.Bytes(5);
  search.client_request_id = row.Bytes(6);
  search.created_unix_ms = row.Int(7);
  search.updated_unix_ms = row.Int(8);
  search.owner = row.Bytes(9);
  return search;
}

// Outcomes as stored: "running", "done", "failed".
const char* OutcomeText(SearchJobRecord::Outcome outcome) {
  switch (outcome) {
    case SearchJobRecord::Outcome::kDone:
      return "done";
    case SearchJobRecord::Outcome::kFailed:
      return "failed";
    case SearchJobRecord::Outcome::kRunning:
      break;
  }
  return "running";
}

absl::StatusOr<SearchJobRecord> ReadSearchJob(const Statement& row) {
  SearchJobRecord job;
  job.search_id = row.Int(0);
  job.trial = static_cast<int32_t>(row.Int(1));
  job.rung = static_cast<int32_t>(row.Int(2));
  job.job_id = row.Int(3);
  const std::string outcome = row.Bytes(4);
  if (outcome == "done") {
    job.outcome = SearchJobRecord::Outcome::kDone;
  } else if (outcome == "failed") {
    job.outcome = SearchJobRecord::Outcome::kFailed;
  } else if (outcome != "running") {
    return absl::DataLossError(
        absl::StrCat("stored search job outcome '", outcome, "' is unknown"));
  }
  const std::string state = row.Bytes(5);
  if (!state.empty()) {
    absl::StatusOr<v1::JobState> parsed = ParseJobState(state);
    if (!parsed.ok()) {
      return absl::DataLossError(
          absl::StrCat("stored job state '", state, "' is unknown"));
    }
    job.job_state = *parsed;
  }
  if (row.Int(6) != 0) job.metric = row.Double(7);  // NaN is stored as NULL
  job.steps = row.Int(8);
  job.reason = row.Bytes(9);
  job.updated_unix_ms = row.Int(10);
  return job;
}

}  // namespace

absl::StatusOr<int64_t> SqliteStore::CreateSearch(const SearchRecord& search) {
  ASSIGN_OR_RETURN(std::string state, SearchStateText(search.state));
  std::string spec;
  if (!search.spec.SerializeToString(&spec)) {
    return absl::InvalidArgumentError("search spec cannot be serialized");
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  if (!search.client_request_id.empty()) {
    ASSIGN_OR_RETURN(sqlite3_stmt * find, Prepare(kFindSearchByRequest));
    Statement existing(db, find);
    existing.BindText(1, search.client_request_id);
    ASSIGN_OR_RETURN(bool found, existing.Step());
    if (found) return existing.Int(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertSearch));
  RETURN_IF_ERROR(Statement(db, insert)
                      .BindText(1, search.name)
                      .BindText(2, state)
                      .BindText(3, search.reason)
                      .BindBlob(4, spec)
                      .BindText(5, search.spec_yaml)
                      .BindTextOrNull(6, search.client_request_id)
                      .BindInt(7, search.created_unix_ms)
                      .BindInt(8, search.updated_unix_ms)
                      .BindText(9, search.owner)
                      .Run());
  const int64_t id = sqlite3_last_insert_rowid(db);
  RETURN_IF_ERROR(txn.Commit());
  return id;
}

absl::StatusOr<SearchRecord> SqliteStore::GetSearch(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSearch));
  Statement row(db_.get(), select);
  row.BindInt(1, id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("search ", id, " not found"));
  return ReadSearch(row);
}

absl::StatusOr<std::vector<SearchRecord>> SqliteStore::ListSearches() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListSearches));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadSearch);
}

absl::Status SqliteStore::UpdateSearch(const SearchRecord& search) {
  ASSIGN_OR_RETURN(std::string state, SearchStateText(search.state));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * update, Prepare(kUpdateSearch));
  RETURN_IF_ERROR(Statement(db_.get(), update)
                      .BindInt(1, search.id)
                      .BindText(2, state)
                      .BindText(3, search.reason)
                      .BindInt(4, search.updated_unix_ms)
                      .Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("search ", search.id, " not found"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::PutSearchJob(const SearchJobRecord& job) {
  const std::string state =
      job.job_state == v1::JOB_STATE_UNSPECIFIED ? "" : JobStateName(job.job_state);
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * exists, Prepare(kSearchExists));
  {
    Statement search(db, exists);
    search.BindInt(1, job.search_id);
    ASSIGN_OR_RETURN(bool found, search.Step());
    if (!found) {
      return absl::NotFoundError(absl::StrCat("search ", job.search_id, " not found"));
    }
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * put, Prepare(kPutSearchJob));
  RETURN_IF_ERROR(Statement(db, put)
                      .BindInt(1, job.search_id)
                      .BindInt(2, job.trial)
                      .BindInt(3, job.rung)
                      .BindInt(4, job.job_id)
                      .BindText(5, OutcomeText(job.outcome))
                      .BindText(6, state)
                      .BindInt(7, job.metric.has_value() ? 1 : 0)
                      .BindDouble(8, job.metric.value_or(0))
                      .BindInt(9, job.steps)
                      .BindText(10, job.reason)
                      .BindInt(11, job.updated_unix_ms)
                      .Run());
  return txn.Commit();
}

absl::StatusOr<std::vector<SearchJobRecord>> SqliteStore::ListSearchJobs(
    int64_t search_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListSearchJobs));
  Statement rows(db_.get(), select);
  rows.BindInt(1, search_id);
  return ReadAll(rows, &ReadSearchJob);
}

}  // namespace tessera
