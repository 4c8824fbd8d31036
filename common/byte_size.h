// Sizes in bytes as people write them: "3GiB", "3000MB", "512k", "1048576".
// The one parser and printer of such sizes, for the job spec's
// memory_per_rank, the worker's limit messages and the coordinator's size
// flags (--db-reserve, --db-max-size, --max-memory-per-rank).
//
// Units are binary multiples whether or not an "i" is written: K, KB and KiB
// are 2^10 bytes, M/MB/MiB 2^20, G/GB/GiB 2^30, T/TB/TiB 2^40 (either case);
// a bare number is bytes. So "3000MB" is 3000 x 2^20 bytes.
//
//   absl::StatusOr<int64_t> bytes = ParseByteSize("3GiB", "memory_per_rank");
//   FormatByteSize(*bytes);  // "3 GiB"
//
// Thread-safe: free functions without shared state.
#ifndef TESSERA_COMMON_BYTE_SIZE_H_
#define TESSERA_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// The size `text` spells, in bytes. InvalidArgument naming `what` (a spec key
// or a flag) for anything else: no digits, a negative or fractional number,
// an unknown unit, or more than an int64 holds.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text, absl::string_view what);

// "3 GiB", "3000 MiB", "1.5 GiB", "512 B": the largest binary unit the size
// reaches, without a fraction when it is a whole number of that unit and
// with one decimal otherwise.
std::string FormatByteSize(int64_t bytes);

}  // namespace tessera

#endif  // TESSERA_COMMON_BYTE_SIZE_H_
