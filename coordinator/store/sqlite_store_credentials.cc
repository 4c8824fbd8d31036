// SqliteStore's credentials: the tokens table (API tokens, kept as hashes of
// their secrets) and the secrets table (values the coordinator generates once
// and then keeps, such as its self-signed TLS identity). Both commit with
// synchronous=FULL.
#include <sqlite3.h>

#include <cstdint>
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

using sqlite_internal::ReadAll;
using sqlite_internal::Statement;

// Statement texts. Each has static storage: its address keys the statement
// cache.
constexpr char kInsertToken[] =
    "INSERT INTO tokens (kind, name, hash, created_ms, admin) VALUES (?1, ?2, ?3, ?4, "
    "?5)";
// The two token queries select the columns ReadToken() reads, in its order.
constexpr char kSelectToken[] =
    "SELECT id, kind, name, hash, created_ms, revoked, admin FROM tokens WHERE id = ?1";
constexpr char kListTokens[] =
    "SELECT id, kind, name, hash, created_ms, revoked, admin FROM tokens ORDER BY id";
constexpr char kRevokeToken[] = "UPDATE tokens SET revoked = 1 WHERE id = ?1";
constexpr char kSelectSecret[] = "SELECT value FROM secrets WHERE name = ?1";
constexpr char kInsertSecret[] = "INSERT INTO secrets (name, value) VALUES (?1, ?2)";

absl::StatusOr<TokenRecord> ReadToken(const Statement& row) {
  TokenRecord token;
  token.id = row.Int(0);
  token.kind = row.Bytes(1);
  token.name = row.Bytes(2);
  token.hash = row.Bytes(3);
  token.created_unix_ms = row.Int(4);
  token.revoked = row.Int(5) != 0;
  token.admin = row.Int(6) != 0;
  return token;
}

}  // namespace

absl::StatusOr<int64_t> SqliteStore::CreateToken(const TokenRecord& token) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertToken));
  RETURN_IF_ERROR(Statement(db_.get(), insert)
                      .BindText(1, token.kind)
                      .BindText(2, token.name)
                      .BindBlob(3, token.hash)
                      .BindInt(4, token.created_unix_ms)
                      .BindInt(5, token.admin ? 1 : 0)
                      .Run());
  return sqlite3_last_insert_rowid(db_.get());
}

absl::StatusOr<TokenRecord> SqliteStore::GetToken(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectToken));
  Statement row(db_.get(), select);
  row.BindInt(1, id);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::NotFoundError(absl::StrCat("token ", id, " not found"));
  return ReadToken(row);
}

absl::StatusOr<std::vector<TokenRecord>> SqliteStore::ListTokens() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kListTokens));
  Statement rows(db_.get(), select);
  return ReadAll(rows, &ReadToken);
}

absl::Status SqliteStore::RevokeToken(int64_t id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  ASSIGN_OR_RETURN(sqlite3_stmt * update, Prepare(kRevokeToken));
  RETURN_IF_ERROR(Statement(db_.get(), update).BindInt(1, id).Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("token ", id, " not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SqliteStore::ExternalWrites() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * pragma, Prepare("PRAGMA data_version"));
  Statement row(db_.get(), pragma);
  ASSIGN_OR_RETURN(bool found, row.Step());
  if (!found) return absl::InternalError("PRAGMA data_version returned no row");
  return row.Int(0);
}

absl::StatusOr<std::string> SqliteStore::GetOrCreateSecret(
    const std::string& name, const std::string& value_if_new) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SetDurability(/*full=*/true));
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Begin(/*write=*/true));
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * select, Prepare(kSelectSecret));
    Statement row(db, select);
    row.BindText(1, name);
    ASSIGN_OR_RETURN(bool found, row.Step());
    if (found) return row.Bytes(0);
  }
  ASSIGN_OR_RETURN(sqlite3_stmt * insert, Prepare(kInsertSecret));
  RETURN_IF_ERROR(
      Statement(db, insert).BindText(1, name).BindBlob(2, value_if_new).Run());
  RETURN_IF_ERROR(txn.Commit());
  return value_if_new;
}

}  // namespace tessera
