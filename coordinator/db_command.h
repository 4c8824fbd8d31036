// `tessera-coordinator db stats`: the database's size per table, the oldest
// data it keeps, and what retention has done (docs/operations.md). Works on
// the file directly, with or without a running coordinator.
//
// Thread-safety: used by main() only.
#ifndef TESSERA_COORDINATOR_DB_COMMAND_H_
#define TESSERA_COORDINATOR_DB_COMMAND_H_

#include <ostream>
#include <string>

#include "coordinator/store/store.h"

namespace tessera {

// Opens the database at `db_path`, prints its stats to stdout and returns the
// process's exit code (1, with the reason on stderr, when it cannot).
int RunDbCommand(const std::string& db_path);

// The stats as `db stats` prints them.
void PrintStoreStats(const std::string& db_path, const StoreStats& stats,
                     std::ostream& out);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_DB_COMMAND_H_
