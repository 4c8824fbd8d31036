#include "coordinator/store/sqlite_util.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tessera {
namespace sqlite_internal {

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  // sqlite3_errmsg describes the most recent failure on this connection, which
  // is the one being reported when rc came from it; otherwise use rc's text.
  const char* message = db != nullptr && sqlite3_extended_errcode(db) == rc
                            ? sqlite3_errmsg(db)
                            : sqlite3_errstr(rc);
  std::string text = absl::StrCat(what, ": ", message, " (sqlite code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(std::move(text));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(std::move(text));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(std::move(text));
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return absl::NotFoundError(
            absl::StrCat(what, ": refers to a job that does not exist"));
      }
      return absl::InternalError(std::move(text));
    default:
      return absl::InternalError(std::move(text));
  }
}

}  // namespace sqlite_internal
}  // namespace tessera
