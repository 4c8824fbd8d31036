// The tessctl job subcommands, one function each (sweeps: sweep_commands.h). A
// command takes its parsed options, a CoordinatorClient and the streams to write
// to, and returns the process exit code (exit_codes.h), so tests run commands
// in-process against a fake JobService.
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

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/exit_codes.h"
#include "cli/output.h"

namespace tessera::cli {

struct ListOptions {
  OutputFormat format = OutputFormat::kTable;
};

struct JobsOptions {
  OutputFormat format = OutputFormat::kTable;
  // Only jobs in this state, named as ParseJobState accepts; empty: all.
  std::string state;
  int32_t limit = 0;      // at most this many, newest first; 0: the server's page (100)
  int64_t sweep_id = 0;   // only the points of this sweep; 0: any
  int64_t before_id = 0;  // paging: only jobs with a smaller id; 0: from the newest
  std::string owner;      // only this user's jobs (admins); empty: the caller's own
};

struct StatusOptions {
  int64_t job_id = 0;
  OutputFormat format = OutputFormat::kTable;
};

struct WaitOptions {
  int64_t job_id = 0;
  // Give up after this long (exit 124); zero or negative waits without limit.
  absl::Duration timeout = absl::ZeroDuration();
  bool progress = false;  // show progress (progress.h) while waiting
  // Redraw one progress line in place at every poll (stdout is a terminal)
  // instead of printing a line every `progress_interval`.
  bool live = false;
  int columns = 0;  // terminal width for `live`; 0: unknown
  absl::Duration poll_interval = absl::Seconds(1);
  absl::Duration progress_interval = absl::Seconds(5);
  // Consecutive failed polls (coordinator unreachable) tolerated before exit 4,
  // so that a coordinator restart does not end the wait.
  int max_poll_failures = 10;
};

struct SubmitOptions {
  std::string spec_path;               // YAML file
  std::vector<std::string> overrides;  // "--set key=value", applied in order
  // Attempts of SubmitJob on UNAVAILABLE / DEADLINE_EXCEEDED, all with the same
  // client request id so the coordinator creates the job at most once.
  int max_attempts = 5;
  // Wait before the second attempt; doubles after each further failure.
  absl::Duration initial_backoff = absl::Milliseconds(500);
  // After submitting, wait for the job with `follow_options` (job_id is filled
  // in) and exit as `wait` does.
  bool follow = false;
  WaitOptions follow_options;
};

struct MetricsOptions {
  int64_t job_id = 0;
  OutputFormat format = OutputFormat::kTable;
  std::string name;  // only this metric; empty: all
};

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

// `tessctl submit SPEC`: reads, overrides, validates and submits a spec. Prints
// "submitted job N (name)" and then the job id alone on the last line of `out`;
// with `follow`, then waits as RunWait does and returns its code.
int RunSubmit(const SubmitOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
// `tessctl jobs`: exit 2 for an unknown --state, before any RPC.
int RunJobs(const JobsOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);
int RunStatus(const StatusOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
int RunWorkers(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
               std::ostream& err);
// `tessctl share`: each user's recent usage and fair-share factor.
// tessctl drain WORKER [--timeout D] / tessctl undrain WORKER.
struct DrainOptions {
  std::string worker;
  double timeout_s = 0;  // 0: the coordinator's --drain-timeout
  bool undrain = false;
};
int RunDrain(const DrainOptions& options, CoordinatorClient& client, std::ostream& out,
             std::ostream& err);

int RunShare(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
             std::ostream& err);
// Polls until the job is terminal: 0 if SUCCEEDED, 1 if FAILED or CANCELLED, 124
// on timeout.
int RunWait(const WaitOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);
int RunMetrics(const MetricsOptions& options, CoordinatorClient& client,
               std::ostream& out, std::ostream& err);
// `tessctl cancel JOB`: stops every rank; exit 0 once CANCELLED is recorded.
int RunCancel(const CancelOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err);
// `tessctl logs JOB [--rank N] [--attempt A] [-f]`: a rank's stdout and stderr.
int RunLogs(const LogsOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMMANDS_H_
