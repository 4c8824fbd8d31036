// Output formatting for tessctl's search commands: the search list, one
// search's state, its trials report (each trial's values, status, rung, steps
// and best metric, the search's best trial marked) and the best trial. Pure
// functions of their arguments; no RPCs, no I/O. docs/tessctl.md documents the
// table, CSV and JSON shapes; the JSON and CSV ones are stable.
//
// Parameter values are shown as the coordinator sends them: text, as the
// spec wrote a choice or as a drawn number prints ("0.0012", "[0.9, 0.95]").
// Parameters appear in the spec's order of search.parameters.
//
// Thread-safety: all functions are thread-compatible and share no state.
#ifndef TESSERA_CLI_SEARCH_OUTPUT_H_
#define TESSERA_CLI_SEARCH_OUTPUT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/output.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// "RUNNING" for SEARCH_STATE_RUNNING.
std::string SearchStateName(tessera::v1::SearchState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(tessera::v1::SearchState state);

// How many of a search's trials have which status (SearchTrial.status).
struct TrialCounts {
  int started = 0;    // trials with a row: every status below
  int running = 0;    // "running"
  int paused = 0;     // "paused": its rung done, not promoted yet
  int stopped = 0;    // "stopped": not promoted, or cut short, when the search ended
  int completed = 0;  // "completed": trained max_length
  int failed = 0;     // "failed"
};
TrialCounts CountTrials(const tessera::v1::Search& search);

// The trial `search.best_trial()` names, or null when none has a metric yet.
const tessera::v1::SearchTrial* BestTrial(const tessera::v1::Search& search);

// The trial's job of its latest rung (0 when none was submitted yet).
int64_t LatestJob(const tessera::v1::SearchTrial& trial);

// "trial 3 (lr=0.0012, weight_decay=0.05)".
std::string DescribeTrial(const tessera::v1::Search& search,
                          const tessera::v1::SearchTrial& trial);

// ID NAME METHOD STATE TRIALS RUNNING FAILED BEST AGE REASON, one row per
// search; BEST is the best trial's metric ("-" before any).
std::string FormatSearchesTable(const std::vector<tessera::v1::Search>& searches,
                                const FormatContext& ctx);
// id,name,method,state,max_trials,started,running,failed,best_trial,best_metric,
// created_unix_ms,updated_unix_ms,reason (best_trial and best_metric empty
// before any)
std::string FormatSearchesCsv(const std::vector<tessera::v1::Search>& searches);

// The search's fields: state, method, metric and mode, budget, trial counts,
// the best trial, times.
std::string FormatSearchStatus(const tessera::v1::Search& search,
                               const FormatContext& ctx);

// One row per trial started: BEST ("*" for the search's best trial), TRIAL,
// a column per parameter, STATUS, RUNG (0-based, the highest started), STEPS,
// the metric's best value (column named by the metric, upper case), AT_STEP
// (the step of that value, where its checkpoint is), JOB (of the latest
// rung).
std::string FormatSearchReportTable(const tessera::v1::Search& search);
// trial,<a column per parameter, named by its key>,status,rung,steps,
// best_metric,best,state,job_ids (separated by spaces),rung_metrics
// (separated by spaces),best_rung,best_step,best_job_id (where best_metric
// was recorded; empty before any); best is "true" for the search's best
// trial.
std::string FormatSearchReportCsv(const tessera::v1::Search& search);

// The best trial, as `search best` prints it: "best trial 3 of search 4:
// val_accuracy 0.8512 at rung 1, step 900, job 12 (running; latest rung 2,
// job 17)" (where it scored best; its latest rung when that is another) and
// its values, one per line.
std::string FormatBestTrial(const tessera::v1::Search& search,
                            const tessera::v1::SearchTrial& trial);

// `search follow`'s line for a trial whose job, job state or status changed:
// "trial 4 (lr=0.001, weight_decay=0.05) rung 1: job 17 RUNNING" while it
// runs ("rung 1: promoted, job 17 QUEUED" when `promoted` to that rung since
// the last line), else its status and the metric at that rung ("rung 0:
// paused, val_accuracy 0.7412"), or its job without one ("rung 0: failed, job
// 13 FAILED").
std::string FormatTrialChange(const tessera::v1::Search& search,
                              const tessera::v1::SearchTrial& trial, bool promoted);
// `search follow`'s counts: "search 3: 12/27 trials started, 5 running, 1
// paused, 2 completed, 4 stopped, 0 failed; best trial 2: val_accuracy
// 0.7412" (paused only when some are; the best once there is one).
std::string FormatSearchProgress(const tessera::v1::Search& search);
// `search follow`'s last line, for an ended search that ran for `took`:
// "search 3 SUCCEEDED in 4m50s: 27 trials; best trial 11: val_accuracy 0.7456
// at rung 2; see tessctl search report 3", else "search 3 FAILED after 4m50s:
// REASON (27 trials, 27 failed)", with "; best trial ..." in the parentheses
// when there is one.
std::string FormatSearchEnd(const tessera::v1::Search& search, absl::Duration took);

// `search status -o json` (detailed: with "trials" and "spec_yaml") and the
// elements of `search list -o json` (without them).
nlohmann::ordered_json SearchToJson(const tessera::v1::Search& search, bool detailed);
// One trial: {"trial", "parameters" {key: text}, "status", "state", "rung",
// "steps", "best_metric" (null before any), "best_rung", "best_step",
// "best_job_id" (where best_metric was recorded; null before any),
// "rung_metrics", "promoted", "job_ids", "best"}.
nlohmann::ordered_json SearchTrialToJson(const tessera::v1::Search& search,
                                         const tessera::v1::SearchTrial& trial);
// `search report -o json`: {"search_id", "name", "state", "method", "metric",
// "mode", "best_trial" (null before any), "trials": [...]}.
nlohmann::ordered_json SearchReportToJson(const tessera::v1::Search& search);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_SEARCH_OUTPUT_H_
