// A rank's own words on why it exited: the last line of its log that starts
// with "tessera-train: exit reason: " (common/trainer_exit.h), from the log's
// final bytes. The worker reads it once the rank exited and sends it with the
// rank's exit code (LocalRank.exit_detail), so that the job's and the rank's
// reasons say "CUDA error: cudaErrorIllegalAddress ..." instead of a bare code.
//
//   const std::string detail = ReadExitDetail(proc.log_path);  // "" if none
//
// The log belongs to the rank's owner: it is opened without following a
// symbolic link and only a regular file is read. Plain C++; thread-safe.
#ifndef TESSERA_WORKER_EXIT_DETAIL_H_
#define TESSERA_WORKER_EXIT_DETAIL_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// The longest detail passed on; a longer one is cut there.
inline constexpr size_t kMaxExitDetail = 1000;

// The text after the prefix on the last such line of `log` (what a log's
// tail holds), control characters replaced by spaces, at most kMaxExitDetail
// bytes; empty when no line has the prefix.
std::string ExitDetailIn(std::string_view log);

// ExitDetailIn of the last `tail_bytes` of the file at `path`; empty when the
// path is empty, not a regular file, or unreadable.
std::string ReadExitDetail(const std::string& path, size_t tail_bytes = 16384);

// The last `tail_bytes` of the log at `path`, opened as ReadExitDetail does;
// empty when it cannot be read.
std::string ReadLogTail(const std::string& path, size_t tail_bytes = 16384);

}  // namespace tessera

#endif  // TESSERA_WORKER_EXIT_DETAIL_H_
