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

Statement& BindMetric(Statement& statement, const MetricRow& metric) {
  return statement.BindInt(1, metric.job_id)
      .BindInt(2, metric.attempt)
      .BindInt(3, metric.rank)
      .BindInt(4, metric.step)
      .BindText(5, metric.name)
      .BindDouble(6, metric.value)
      .BindInt(7, metric.unix_ms);
}

absl::StatusOr<MetricRow> ReadMetric(const Statement& row) {
  MetricRow metric;
  metric.job_id = row.Int(0);
  metric.attempt = static_cast<int32_t>(row.Int(1));
  metric.rank = static_cast<int32_t>(row.Int(2));
  metric.step = row.Int(3);
  metric.name = row.Bytes(4);
  metric.value = row.Double(5);
  metric.unix_ms = row.Int(6);
  return metric;
}

}  // namespace sqlite_internal
}  // namespace tessera
