// SqliteStore's worker_credentials table: the hash of each worker's own
// credential (see coordinator/core/worker_identity.h). Commits with
// synchronous=FULL: a worker is handed its credential only once it is stored.
#include <sqlite3.h>

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
constexpr char kPutWorkerCredential[] =
    "INSERT OR REPLACE INTO worker_credentials (worker, hash, issued_ms) "
    "VALUES (?1, ?2, ?3)";
constexpr char kListWorkerCredentials[] =
    "SELECT worker, hash, issued_ms FROM worker_credentials ORDER BY worker";

absl::StatusOr<WorkerCredentialRecord> ReadWorkerCredential(const Statement& row) {
  WorkerCredentialRecord credential;
  credential.worker = row.Bytes(0);
  credential.hash = row.Bytes(1);
  credential.issued_unix_ms = row.Int(2);
  return credential;
}

}  // namespace

absl::Status SqliteStore::PutWorkerCredential(const WorkerCredentialRecord& credential) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * put, Prepare(kPutWorkerCredential));
  return Statement(db_.get(), put)
      .BindText(1, credential.worker)
      .BindBlob(2, credential.hash)
      .BindInt(3, credential.issued_unix_ms)
      .Run();
}

absl::StatusOr<std::vector<WorkerCredentialRecord>> SqliteStore::ListWorkerCredentials() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListWorkerCredentials));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadWorkerCredential);
}

}  // namespace tessera
