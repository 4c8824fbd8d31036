// The tessctl sweep subcommands: submit a sweep spec (common/
// sweep_spec.h), follow it, list sweeps, show one sweep's points, print its
// scaling report, cancel it. Same contract as commands.h: options in, exit code
// out, results on `out`, diagnostics on `err`.
//
// Thread-safety: the functions share no state; each call uses only its arguments.
#ifndef TESSERA_CLI_SWEEP_COMMANDS_H_
#define TESSERA_CLI_SWEEP_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/follow.h"
#include "cli/output.h"

namespace tessera::cli {

// How to follow (follow.h) which sweep.
struct SweepFollowOptions : FollowOptions {
  int64_t sweep_id = 0;
};

struct SweepSubmitOptions {
  std::string spec_path;               // sweep spec YAML file
  std::vector<std::string> overrides;  // "--set key=value", e.g. base.trainer.epochs=1
  // As SubmitOptions: retries of SubmitSweep with one client request id.
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  // After submitting, follow the sweep (sweep_id is filled in) until it ends.
  bool follow = false;
  SweepFollowOptions follow_options;
};

struct SweepIdOptions {
  int64_t sweep_id = 0;
  OutputFormat format = OutputFormat::kTable;
};

// `tessctl sweep submit FILE` (and `tessctl sweep FILE`): validates the spec
// locally (exit 2 naming the field on error), submits it, prints
// "submitted sweep N (name): P points" and then the sweep id alone on the last
// line; with `follow`, then follows it as RunSweepFollow does.
int RunSweepSubmit(const SweepSubmitOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err);
// Polls the sweep until it ends, printing each point's state changes and a
// status line with the running point's progress. 0 if it SUCCEEDED, 1 if not.
int RunSweepFollow(const SweepFollowOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err);
// `tessctl sweep list`.
int RunSweepList(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
                 std::ostream& err);
// `tessctl sweep status SWEEP`: the sweep's state and its points table.
int RunSweepStatus(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err);
// `tessctl sweep report SWEEP`: the coordinator's per-point figures.
int RunSweepReport(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err);
// `tessctl sweep cancel SWEEP`: exit 0 once CANCELLED, 1 if it had ended.
int RunSweepCancel(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_SWEEP_COMMANDS_H_
