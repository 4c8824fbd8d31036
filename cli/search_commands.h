// The tessctl search subcommands: submit a search spec (common/
// search_spec.h, docs/search.md), follow it, list searches, show one search's state,
// print its trials report, cancel it, and show (or export the weights of)
// its best trial. Same contract as commands.h: options in, exit code out,
// results on `out`, diagnostics on `err`.
//
// Thread-safety: the functions share no state; each call uses only its arguments.
#ifndef TESSERA_CLI_SEARCH_COMMANDS_H_
#define TESSERA_CLI_SEARCH_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/export_command.h"
#include "cli/follow.h"
#include "cli/output.h"

namespace tessera::cli {

// How to follow (follow.h) which search.
struct SearchFollowOptions : FollowOptions {
  int64_t search_id = 0;
};

struct SearchSubmitOptions {
  std::string spec_path;               // search spec YAML file
  std::vector<std::string> overrides;  // "--set key=value", e.g. search.max_trials=9
  // As SubmitOptions: retries of SubmitSearch with one client request id.
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  // After submitting, follow the search (search_id is filled in) until it ends.
  bool follow = false;
  SearchFollowOptions follow_options;
};

struct SearchIdOptions {
  int64_t search_id = 0;
  OutputFormat format = OutputFormat::kTable;
};

struct SearchBestOptions {
  int64_t search_id = 0;
  OutputFormat format = OutputFormat::kTable;
  // With `export_options.out` set, the best trial's weights are written there
  // (export_options.job_id and step are filled in: where it scored best).
  ExportOptions export_options;
};

// `tessctl search submit FILE` (and `tessctl search FILE`): validates the spec
// locally (exit 2 naming the key on error), submits it, prints "submitted
// search N (name): T trials" and then the search id alone on the last line;
// with `follow`, then follows it as RunSearchFollow does.
int RunSearchSubmit(const SearchSubmitOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err);
// `tessctl search follow SEARCH`: polls the search until it ends, printing a
// line per trial whose job, job state or status changed (FormatTrialChange)
// and a status line with the trial counts, the best trial and one running
// trial's progress; then FormatSearchEnd. 0 if it SUCCEEDED, 1 if not.
int RunSearchFollow(const SearchFollowOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err);
// `tessctl search list`.
int RunSearchList(const ListOptions& options, CoordinatorClient& client,
                  std::ostream& out, std::ostream& err);
// `tessctl search status SEARCH`: the search's state, counts and best trial.
int RunSearchStatus(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err);
// `tessctl search report SEARCH`: a row per trial, the best one marked.
int RunSearchReport(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err);
// `tessctl search cancel SEARCH`: exit 0 once CANCELLED, 1 if it had ended.
int RunSearchCancel(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err);
// `tessctl search best SEARCH [--export FILE]`: the best trial; with --export,
// its weights through `tessctl export` (export_command.h) of the checkpoint
// that scored best: SearchTrial.best_step of best_job_id, which need not be
// the trial's newest (a later rung may score worse, or still train). Exit 1
// when no trial has a metric yet, and when that checkpoint cannot be
// exported (the message says how to export the newest instead).
int RunSearchBest(const SearchBestOptions& options, CoordinatorClient& client,
                  std::ostream& out, std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_SEARCH_COMMANDS_H_
