#include "coordinator/db_command.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "coordinator/store/sqlite_store.h"

namespace tessera {
namespace {

// "31.2 MiB"; "unknown" below 0.
std::string Bytes(int64_t bytes) {
  if (bytes < 0) return "unknown";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string Date(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// "job 17 (... 2026-01-02 10:00 UTC)", or "none".
std::string OldestJob(int64_t job, int64_t unix_ms, const char* what) {
  if (job == 0) return "none";
  return absl::StrCat("job ", job, " (", what, " ", Date(unix_ms), ")");
}

}  // namespace

void PrintStoreStats(const std::string& db_path, const StoreStats& stats,
                     std::ostream& out) {
  const StoreSize& size = stats.size;
  out << "DATABASE  " << db_path << "\n"
      << "FILE      " << Bytes(size.file_bytes) << " (" << size.file_bytes
      << " bytes): " << Bytes(size.used_bytes()) << " in use, " << Bytes(size.free_bytes)
      << " free pages; WAL " << Bytes(size.wal_bytes) << "; auto_vacuum "
      << stats.auto_vacuum << "\n\n";
  out << absl::StrFormat("%-22s %12s %12s\n", "TABLE", "ROWS", "SIZE");
  for (const StoreStats::Table& table : stats.tables) {
    out << absl::StrFormat("%-22s %12d %12s\n", table.name, table.rows,
                           Bytes(table.bytes));
  }
  out << "\nOLDEST KEPT\n"
      << "  job record   "
      << OldestJob(stats.oldest_job, stats.oldest_job_unix_ms, "submitted") << "\n"
      << "  metrics      "
      << OldestJob(stats.oldest_metrics_job, stats.oldest_metrics_unix_ms, "first point")
      << "\n"
      << "  logs         "
      << OldestJob(stats.oldest_logs_job, stats.oldest_logs_unix_ms, "submitted") << "\n"
      << "\nRETENTION    finished jobs with metrics downsampled: "
      << stats.jobs_metrics_downsampled
      << ", metrics thinned: " << stats.jobs_metrics_thinned
      << ", metrics dropped: " << stats.jobs_metrics_dropped
      << ", logs dropped: " << stats.jobs_logs_dropped << "\n";
}

int RunDbCommand(const std::string& db_path) {
  std::error_code error;
  if (db_path != ":memory:" && !std::filesystem::exists(db_path, error)) {
    std::cerr << "tessera-coordinator: no database at " << db_path << " (--db)\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(db_path);
  if (!store.ok()) {
    std::cerr << "tessera-coordinator: " << store.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<StoreStats> stats = (*store)->GetStoreStats();
  if (!stats.ok()) {
    std::cerr << "tessera-coordinator: " << stats.status().message() << "\n";
    return 1;
  }
  PrintStoreStats(db_path, *stats, std::cout);
  return 0;
}

}  // namespace tessera
