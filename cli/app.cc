#include "cli/app.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"

namespace tessera::cli {

namespace {

constexpr char kExitCodes[] = R"(Exit codes:
  0    success (wait: the job SUCCEEDED)
  1    the job FAILED or was CANCELLED, or another error
  2    usage error: bad arguments or an invalid job spec
  3    no such job
  4    coordinator unreachable
  124  wait --timeout ran out)";

std::string Footer(const std::string& examples) {
  return absl::StrCat("Examples:\n", examples, "\n\n", kExitCodes);
}

OutputFormat ToFormat(const std::string& name) {
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return OutputFormat::kTable;
}

// The option stores the name; CLI11 rejects names outside `names`.
void AddFormatOption(CLI::App* sub, std::string* format,
                     const std::vector<std::string>& names) {
  *format = "table";
  sub->add_option("-o,--output", *format,
                  absl::StrCat("Output format: ", absl::StrJoin(names, "|")))
      ->check(CLI::IsMember(names, CLI::ignore_case))
      ->capture_default_str();
}

void AddJobId(CLI::App* sub, int64_t* job_id) {
  sub->add_option("job", *job_id, "Job id")->required()->check(CLI::PositiveNumber);
}

}  // namespace

int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err) {
  CLI::App app("tessctl: submit and inspect Tessera training jobs.", "tessctl");
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();
  app.footer(
      Footer("  tessctl submit examples/fmnist-2rank.yaml\n"
             "  tessctl --coordinator 10.0.0.5:50051 jobs -o json"));

  std::string coordinator = kDefaultCoordinator;
  app.add_option("--coordinator", coordinator,
                 absl::StrCat("Coordinator gRPC address HOST:PORT (default: $",
                              kCoordinatorEnv, ", then ", kDefaultCoordinator, ")"))
      ->envname(kCoordinatorEnv);

  SubmitOptions submit;
  CLI::App* submit_cmd = app.add_subcommand(
      "submit", "Validate a job spec locally and submit it; prints the job id last");
  submit_cmd->add_option("spec", submit.spec_path, "Job spec YAML file")->required();
  submit_cmd
      ->add_option("--set", submit.overrides,
                   "Override a spec field before validation, KEY=VALUE with KEY a dotted "
                   "path (repeatable)")
      ->allow_extra_args(false);
  submit_cmd->footer(Footer(
      "  tessctl submit examples/fmnist-2rank.yaml\n"
      "  tessctl submit examples/fmnist-2rank.yaml --set trainer.epochs=2 "
      "--set world_size=4\n"
      "  JOB=$(tessctl submit job.yaml | tail -n1) && tessctl wait \"$JOB\" --progress"));

  ListOptions jobs;
  std::string jobs_format;
  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List jobs, newest first");
  AddFormatOption(jobs_cmd, &jobs_format, {"table", "json"});
  jobs_cmd->footer(Footer("  tessctl jobs\n  tessctl jobs -o json | jq '.[0].state'"));

  StatusOptions status;
  std::string status_format;
  CLI::App* status_cmd =
      app.add_subcommand("status", "Show one job: state, reason, spec and ranks");
  AddJobId(status_cmd, &status.job_id);
  AddFormatOption(status_cmd, &status_format, {"table", "json"});
  status_cmd->footer(
      Footer("  tessctl status 3\n  tessctl status 3 -o json | jq -r .state"));

  ListOptions workers;
  std::string workers_format;
  CLI::App* workers_cmd =
      app.add_subcommand("workers", "List registered workers and their slots");
  AddFormatOption(workers_cmd, &workers_format, {"table", "json"});
  workers_cmd->footer(Footer("  tessctl workers\n  tessctl workers -o json"));

  WaitOptions wait;
  double wait_timeout_s = 0;
  CLI::App* wait_cmd = app.add_subcommand(
      "wait", "Wait until a job finishes; exit 0 if it SUCCEEDED, 1 if not");
  AddJobId(wait_cmd, &wait.job_id);
  wait_cmd
      ->add_option("--timeout", wait_timeout_s,
                   "Give up after SECONDS and exit 124 (default: wait without limit)")
      ->check(CLI::NonNegativeNumber);
  wait_cmd->add_flag("--progress", wait.progress,
                     "Print step, loss and throughput every few seconds");
  wait_cmd->footer(Footer("  tessctl wait 3\n  tessctl wait 3 --timeout 900 --progress"));

  CancelOptions cancel;
  CLI::App* cancel_cmd =
      app.add_subcommand("cancel", "Stop every rank of a job and record it CANCELLED");
  AddJobId(cancel_cmd, &cancel.job_id);
  cancel_cmd->footer(Footer("  tessctl cancel 3"));

  LogsOptions logs;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "Print a rank's captured stdout and stderr (kept after its worker is gone)");
  AddJobId(logs_cmd, &logs.job_id);
  logs_cmd->add_option("--rank", logs.rank, "Rank whose log to print")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  logs_cmd->add_option("--attempt", logs.attempt, "Attempt (default: the current one)")
      ->check(CLI::NonNegativeNumber);
  logs_cmd->add_flag("-f,--follow", logs.follow,
                     "Keep printing until the rank's log ends");
  logs_cmd->footer(Footer("  tessctl logs 3\n  tessctl logs 3 --rank 1 -f"));

  MetricsOptions metrics;
  std::string metrics_format;
  CLI::App* metrics_cmd = app.add_subcommand("metrics", "Print a job's stored metrics");
  AddJobId(metrics_cmd, &metrics.job_id);
  AddFormatOption(metrics_cmd, &metrics_format, {"table", "json", "csv"});
  metrics_cmd->add_option("--name", metrics.name, "Only this metric, e.g. loss");
  metrics_cmd->footer(Footer(
      "  tessctl metrics 3 --name loss\n  tessctl metrics 3 -o csv > metrics.csv"));

  // CLI11 consumes arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  jobs.format = ToFormat(jobs_format);
  status.format = ToFormat(status_format);
  workers.format = ToFormat(workers_format);
  metrics.format = ToFormat(metrics_format);
  wait.timeout = absl::Seconds(wait_timeout_s);

  std::unique_ptr<CoordinatorClient> client = make_client(coordinator);
  if (submit_cmd->parsed()) return RunSubmit(submit, *client, out, err);
  if (jobs_cmd->parsed()) return RunJobs(jobs, *client, out, err);
  if (status_cmd->parsed()) return RunStatus(status, *client, out, err);
  if (workers_cmd->parsed()) return RunWorkers(workers, *client, out, err);
  if (wait_cmd->parsed()) return RunWait(wait, *client, out, err);
  if (metrics_cmd->parsed()) return RunMetrics(metrics, *client, out, err);
  if (cancel_cmd->parsed()) return RunCancel(cancel, *client, out, err);
  if (logs_cmd->parsed()) return RunLogs(logs, *client, out, err);
  err << "tessctl: no command given; see tessctl --help\n";
  return kExitUsage;
}

}  // namespace tessera::cli
