// Helpers shared by tessctl's command implementations (commands.cc,
// sweep_commands.cc): error reporting with exit codes, submit retries, spec
// files, JSON printing. Not part of tessctl's interface.
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_CLI_COMMAND_UTIL_H_
#define TESSERA_CLI_COMMAND_UTIL_H_

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "common/clock.h"
#include "common/retry.h"

namespace tessera::cli {

// The clock and zone tables are drawn against.
FormatContext NowContext();

// Prints `value` through common/json_writer.h (two spaces a level, invalid UTF-8
// from the server replaced) and a newline.
void PrintJson(const nlohmann::ordered_json& value, std::ostream& out);

// Reports a failed RPC on `err` and returns its exit code. `subject` names what
// was asked for ("job 3", "sweep 4") in a not-found message.
int ReportRpcError(const absl::Status& status, const CoordinatorClient& client,
                   const std::optional<std::string>& subject, std::ostream& err);

// UNAVAILABLE or DEADLINE_EXCEEDED: the coordinator may be restarting.
bool IsRetryable(const absl::Status& status);

// 128 random bits as hex: unique per submit, shared by that submit's retries.
std::string NewRequestId();

// A spec file's text (ReadFile, common/file_io.h): NotFound for a missing file,
// InvalidArgument over 1 MiB, each naming the path.
absl::StatusOr<std::string> ReadSpecFile(const std::string& path);

// ReadSpecFile followed by ApplySpecOverrides; on failure writes the reason to
// `err` and returns nullopt (a usage error for the caller).
std::optional<std::string> ReadSpecWithOverrides(
    const std::string& path, const std::vector<std::string>& overrides,
    std::ostream& err);

// Calls `call()` up to `max_attempts` times while it fails with a retryable
// status, sleeping `backoff` (doubling, without jitter: one client, and the
// waits it prints are the ones it takes) in between and saying so on `err`.
template <typename Call>
auto CallWithRetries(Call call, int max_attempts, absl::Duration backoff,
                     absl::string_view what, std::ostream& err) -> decltype(call()) {
  RealClock clock;
  return Retry({.initial_delay = backoff,
                .max_delay = absl::InfiniteDuration(),
                .jitter = 0,
                .max_attempts = std::max(max_attempts, 1),
                .retryable = IsRetryable},
               clock, call,
               [&](const absl::Status& status, int attempt, absl::Duration delay) {
                 err << "tessctl: " << what << " attempt " << attempt << " failed ("
                     << status.message() << "); retrying in "
                     << absl::FormatDuration(delay) << "\n";
               });
}

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMMAND_UTIL_H_
