// The tessctl subcommands, one function each. A command takes its parsed options,
// a CoordinatorClient and the streams to write to, and returns the process exit
// code, so tests run commands in-process against a fake JobService.
//
// Output contract: results go to `out`, diagnostics ("tessctl: ...") to `err`.
//
// Thread-safety: the functions share no state; each call uses only its arguments.
#ifndef TESSERA_CLI_COMMANDS_H_
#define TESSERA_CLI_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/output.h"

namespace tessera::cli {

// Process exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // job failed or cancelled; other errors
inline constexpr int kExitUsage = 2;        // bad command line or invalid spec
inline constexpr int kExitNotFound = 3;     // no such job
inline constexpr int kExitUnreachable = 4;  // coordinator did not answer
inline constexpr int kExitTimeout = 124;    // `wait --timeout` ran out

struct SubmitOptions {
  std::string spec_path;               // YAML file
  std::vector<std::string> overrides;  // "--set key=value", applied in order
  // Attempts of SubmitJob on UNAVAILABLE / DEADLINE_EXCEEDED, all with the same
  // client request id so the coordinator creates the job at most once.
  int max_attempts = 5;
  // Wait before the second attempt; doubles after each further failure.
  absl::Duration initial_backoff = absl::Milliseconds(500);
};

struct ListOptions {
  OutputFormat format = OutputFormat::kTable;
};

struct StatusOptions {
  int64_t job_id = 0;
  OutputFormat format = OutputFormat::kTable;
};

struct WaitOptions {
  int64_t job_id = 0;
  // Give up after this long (exit 124); zero or negative waits without limit.
  absl::Duration timeout = absl::ZeroDuration();
  bool progress = false;  // print a progress line every `progress_interval`
  absl::Duration poll_interval = absl::Seconds(1);
  absl::Duration progress_interval = absl::Seconds(5);
  // Consecutive failed polls (coordinator unreachable) tolerated before exit 4,
  // so that a coordinator restart does not end the wait.
  int max_poll_failures = 10;
};

struct MetricsOptions {
  int64_t job_id = 0;
  OutputFormat format = OutputFormat::kTable;
  std::string name;  // only this metric; empty: all
};

// Reads, overrides, validates and submits a spec. Prints "submitted job N (name)"
// and then the job id alone on the last line of `out`.
struct CancelOptions {
  int64_t job_id = 0;
};

struct LogsOptions {
  int64_t job_id = 0;
  int32_t rank = 0;
  int32_t attempt = 0;  // 0: the current attempt
  bool follow = false;  // keep printing until the rank's log is complete
  absl::Duration poll_interval = absl::Seconds(1);
};

// `tessctl cancel JOB`: stops every rank; exit 0 once CANCELLED is recorded.
int RunCancel(const CancelOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
// `tessctl logs JOB [--rank N] [--attempt A] [-f]`: a rank's stdout and stderr.
int RunLogs(const LogsOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);

int RunSubmit(const SubmitOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
int RunJobs(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);
int RunStatus(const StatusOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
int RunWorkers(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
               std::ostream& err);
// Polls until the job is terminal: 0 if SUCCEEDED, 1 if FAILED or CANCELLED, 124
// on timeout.
int RunWait(const WaitOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);
int RunMetrics(const MetricsOptions& options, CoordinatorClient& client,
               std::ostream& out, std::ostream& err);

// Every stored point of a job with step > `after_step` (and name `name` if
// non-empty), fetched in pages. Exposed for tests.
absl::StatusOr<std::vector<tessera::v1::MetricPoint>> FetchMetrics(
    CoordinatorClient& client, int64_t job_id, int64_t after_step,
    const std::string& name);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMMANDS_H_
