// What `tessctl sweep follow` and `tessctl search follow` share: a loop that
// polls the thing followed until it ends, tolerating a run of retryable RPC
// failures; the screen it prints to, event lines stamped with the time since
// the follower started ("[01:23] ...") below one status line that is redrawn in
// place on a terminal and printed every progress interval elsewhere; and the
// progress of the one job a status line shows.
//
// A follower says how to read and print one kind of snapshot (a v1::Sweep, a
// v1::Search) by implementing FollowTarget, and FollowUntilEnd runs it:
//
//   class SweepTarget : public FollowTarget<v1::Sweep> { ... };
//   SweepTarget target(options.sweep_id, client, err);
//   return FollowUntilEnd(options, target, out);
//
// Thread-safety: a FollowScreen, a JobProgress and one FollowUntilEnd call
// serve one command on one thread.
#ifndef TESSERA_CLI_FOLLOW_H_
#define TESSERA_CLI_FOLLOW_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/command_util.h"
#include "cli/progress.h"

namespace tessera::cli {

struct FollowOptions {
  // Redraw one status line in place (stdout is a terminal) instead of printing
  // a status line every `progress_interval`. Changes are printed as lines
  // either way.
  bool live = false;
  int columns = 0;  // terminal width for `live`; 0: unknown
  absl::Duration poll_interval = absl::Seconds(1);
  absl::Duration progress_interval = absl::Seconds(10);
  // Consecutive failed polls tolerated before exit 4.
  int max_poll_failures = 10;
};

// "[01:23] ": the time since the follower started, as every line begins.
std::string ElapsedPrefix(absl::Duration elapsed);

// How long a sweep or search ran, from its created and updated times (once it
// ended, updated is its end), or `fallback` when they do not say.
absl::Duration RunDuration(int64_t created_unix_ms, int64_t updated_unix_ms,
                           absl::Duration fallback);

// Where a follower prints: event lines, and a status line that stays below
// them on a terminal.
class FollowScreen {
 public:
  FollowScreen(std::ostream& out, bool live, int columns)
      : out_(out), live_(live), columns_(columns) {}

  // "[01:23] `text`" as a line of its own, in place of the live status line.
  void PrintEvent(absl::Duration elapsed, std::string_view text);
  // Redraws the status line in place when live, else prints it as a line.
  void ShowStatus(const std::string& line);
  // Erases the live status line, if one is on screen.
  void ClearStatus();

 private:
  std::ostream& out_;
  const bool live_;
  const int columns_;
  bool drawn_ = false;  // a live status line is on screen
};

// The progress line (progress.h) of the job a status line shows, one job at a
// time: its new metric points are fetched at each call; another job starts
// over.
class JobProgress {
 public:
  // "[01:23] `label` RUNNING step 120/400 ...", or the error reading the job.
  absl::StatusOr<std::string> Line(CoordinatorClient& client, int64_t job_id,
                                   absl::Duration elapsed, std::string label);

 private:
  std::optional<std::pair<int64_t, ProgressTracker>> tracked_;
};

// What one kind of follower reads and prints; FollowUntilEnd calls it.
template <typename Snapshot>
class FollowTarget {
 public:
  virtual ~FollowTarget() = default;

  // Reads the thing followed once.
  virtual absl::StatusOr<Snapshot> Poll() = 0;
  // Prints on `screen` what changed since the last poll.
  virtual void PrintChanges(const Snapshot& now, absl::Duration elapsed,
                            FollowScreen& screen) = 0;
  virtual bool Ended(const Snapshot& now) const = 0;
  // The status line while it runs.
  virtual std::string StatusLine(const Snapshot& now, absl::Duration elapsed) = 0;
  // Prints how it ended on `out`; returns the exit code.
  virtual int ReportEnd(const Snapshot& now, absl::Duration elapsed,
                        std::ostream& out) = 0;
  // Reports a poll that failed for good; returns the exit code.
  virtual int ReportPollError(const absl::Status& status) = 0;
};

// Polls `target` every poll interval until it ends, printing its changes and
// status line on `out`, and returns ReportEnd's exit code. Up to
// max_poll_failures - 1 retryable failures in a row are waited out; any other
// failure, or one more, is ReportPollError's.
template <typename Snapshot>
int FollowUntilEnd(const FollowOptions& options, FollowTarget<Snapshot>& target,
                   std::ostream& out) {
  const absl::Time start = absl::Now();
  absl::Time next_status = start;
  int failures = 0;
  FollowScreen screen(out, options.live, options.columns);
  while (true) {
    absl::StatusOr<Snapshot> now = target.Poll();
    if (!now.ok()) {
      if (IsRetryable(now.status()) && ++failures < options.max_poll_failures) {
        absl::SleepFor(options.poll_interval);
        continue;
      }
      screen.ClearStatus();
      return target.ReportPollError(now.status());
    }
    failures = 0;
    const absl::Duration elapsed = absl::Now() - start;
    target.PrintChanges(*now, elapsed, screen);
    if (target.Ended(*now)) {
      screen.ClearStatus();
      return target.ReportEnd(*now, elapsed, out);
    }
    if (options.live || absl::Now() >= next_status) {
      screen.ShowStatus(target.StatusLine(*now, elapsed));
      next_status = absl::Now() + options.progress_interval;
    }
    absl::SleepFor(options.poll_interval);
  }
}

}  // namespace tessera::cli

#endif  // TESSERA_CLI_FOLLOW_H_
