#include "cli/app.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/exit_codes.h"
#include "cli/export_command.h"
#include "cli/sweep_commands.h"

namespace tessera::cli {

namespace {

constexpr char kExitCodes[] = R"(Exit codes:
  0    success (wait, --follow: the job or sweep SUCCEEDED)
  1    the job or sweep FAILED or was CANCELLED, or another error
  2    usage error: bad arguments or an invalid job or sweep spec
  3    no such job or sweep
  4    coordinator unreachable
  124  wait --timeout ran out)";

std::string Footer(const std::string& examples) {
  return absl::StrCat("Examples:\n", examples, "\n\n", kExitCodes);
}

OutputFormat ToFormat(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "json") return OutputFormat::kJson;
  if (lower == "csv") return OutputFormat::kCsv;
  return OutputFormat::kTable;
}

// Builds the command tree and remembers, for shell completion, what CLI11 does
// not record in a readable form (option choices, file arguments).
class Builder {
 public:
  // -o/--output, one spelling for every command; CLI11 rejects other names.
  void AddFormatOption(CLI::App* sub, std::string* format,
                       const std::vector<std::string>& names) {
    *format = "table";
    sub->add_option("-o,--output", *format,
                    absl::StrCat("Output format: ", absl::StrJoin(names, "|")))
        ->check(CLI::IsMember(names, CLI::ignore_case))
        ->capture_default_str();
    AddChoices(sub, {"-o", "--output"}, names);
  }

  void AddChoices(CLI::App* sub, const std::vector<std::string>& option_names,
                  const std::vector<std::string>& choices) {
    for (const std::string& name : option_names) {
      hints_.choices[{CommandPath(*sub), name}] = choices;
    }
  }

  void AddId(CLI::App* sub, const std::string& name, int64_t* id,
             const std::string& description) {
    sub->add_option(name, *id, description)->required()->check(CLI::PositiveNumber);
  }

  void AddFile(CLI::App* sub, std::string* path, const std::string& description,
               bool required) {
    CLI::Option* opt = sub->add_option("file", *path, description);
    if (required) opt->required();
    hints_.file_commands.insert(CommandPath(*sub));
  }

  void AddPositionalWords(CLI::App* sub, std::vector<std::string> words) {
    hints_.positional_words[CommandPath(*sub)] = std::move(words);
  }

  const CompletionHints& hints() const { return hints_; }

 private:
  CompletionHints hints_;
};

std::vector<std::string> LowerStateNames() {
  std::vector<std::string> names = JobStateNames();
  for (std::string& name : names) name = absl::AsciiStrToLower(name);
  return names;
}

}  // namespace

int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err, const Terminal& terminal) {
  CLI::App app("tessctl: submit and inspect Tessera training jobs and sweeps.",
               "tessctl");
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();
  app.footer(
      Footer("  tessctl submit examples/fmnist-2rank.yaml --follow\n"
             "  tessctl --coordinator 10.0.0.5:50051 jobs --state running -o json\n"
             "  tessctl sweep examples/sweep-vit-micro-2x2.yaml\n"
             "  source <(tessctl completion bash)"));
  Builder builder;

  std::string coordinator = kDefaultCoordinator;
  app.add_option("--coordinator", coordinator,
                 absl::StrCat("Coordinator gRPC address HOST:PORT (default: $",
                              kCoordinatorEnv, ", then ", kDefaultCoordinator, ")"))
      ->envname(kCoordinatorEnv);
  // No default shown: the token must never appear in help or messages.
  std::string token;
  app.add_option(
         "--token", token,
         absl::StrCat("Bearer token sent with every request (default: $", kTokenEnv, ")"))
      ->envname(kTokenEnv);
  std::string tls_ca;
  std::string tls_pin;
  app.add_option("--tls-ca", tls_ca,
                 absl::StrCat("PEM roots that verify the coordinator's TLS certificate "
                              "(default: $",
                              kTlsCaEnv, ")"))
      ->envname(kTlsCaEnv);
  app.add_option("--tls-pin", tls_pin,
                 absl::StrCat("SHA-256 of the coordinator's self-signed certificate "
                              "(default: $",
                              kTlsPinEnv, ", then the pin the token carries)"))
      ->envname(kTlsPinEnv);

  // ---- jobs ----
  SubmitOptions submit;
  CLI::App* submit_cmd = app.add_subcommand(
      "submit", "Validate a job spec locally and submit it; prints the job id last");
  builder.AddFile(submit_cmd, &submit.spec_path, "Job spec YAML file", true);
  submit_cmd
      ->add_option("--set", submit.overrides,
                   "Override a spec field before validation, KEY=VALUE with KEY a dotted "
                   "path (repeatable)")
      ->allow_extra_args(false);
  submit_cmd->add_flag("--follow", submit.follow,
                       "Then show the job's progress until it ends and exit as `wait` "
                       "does");
  submit_cmd->footer(Footer(
      "  tessctl submit examples/fmnist-2rank.yaml\n"
      "  tessctl submit examples/fmnist-2rank.yaml --set trainer.epochs=2 "
      "--set world_size=4\n"
      "  tessctl submit examples/fmnist-2rank.yaml --follow\n"
      "  JOB=$(tessctl submit job.yaml | tail -n1) && tessctl wait \"$JOB\" --progress"));

  JobsOptions jobs;
  std::string jobs_format;
  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List jobs, newest first");
  builder.AddFormatOption(jobs_cmd, &jobs_format, {"table", "json", "csv"});
  jobs_cmd->add_option(
      "--state", jobs.state,
      absl::StrCat("Only jobs in this state: ", absl::StrJoin(JobStateNames(), "|"),
                   " (any case, JOB_STATE_ prefix optional)"));
  builder.AddChoices(jobs_cmd, {"--state"}, LowerStateNames());
  jobs_cmd
      ->add_option("--limit", jobs.limit,
                   "At most N jobs, newest first (0: the coordinator's page, 100)")
      ->check(CLI::NonNegativeNumber);
  jobs_cmd
      ->add_option("--before", jobs.before_id,
                   "Paging: only jobs older than this id (printed when there are more)")
      ->check(CLI::PositiveNumber);
  jobs_cmd->add_option(
      "--owner", jobs.owner,
      "Only this user's jobs (admins; others always see only their own)");
  jobs_cmd->add_option("--sweep", jobs.sweep_id, "Only the points of this sweep")
      ->check(CLI::PositiveNumber);
  jobs_cmd->footer(Footer(
      "  tessctl jobs\n  tessctl jobs --state running --limit 10\n"
      "  tessctl jobs --before 120\n  tessctl jobs --owner alice   # admins\n"
      "  tessctl jobs -o json | jq '.[0].state'\n  tessctl jobs -o csv > jobs.csv"));

  StatusOptions status;
  std::string status_format;
  CLI::App* status_cmd =
      app.add_subcommand("status", "Show one job: state, reason, spec and ranks");
  builder.AddId(status_cmd, "job", &status.job_id, "Job id");
  builder.AddFormatOption(status_cmd, &status_format, {"table", "json"});
  status_cmd->footer(
      Footer("  tessctl status 3\n  tessctl status 3 -o json | jq -r .state"));

  ListOptions workers;
  std::string workers_format;
  CLI::App* workers_cmd =
      app.add_subcommand("workers", "List registered workers and their slots");
  builder.AddFormatOption(workers_cmd, &workers_format, {"table", "json", "csv"});
  workers_cmd->footer(Footer("  tessctl workers\n  tessctl workers -o json"));

  ListOptions share;
  std::string share_format;
  CLI::App* share_cmd = app.add_subcommand(
      "share",
      "Show recent usage (slot-seconds, decayed) and fair-share factor: your own, or "
      "every user's for an admin. Equal-priority jobs of users with a higher factor "
      "start first");
  builder.AddFormatOption(share_cmd, &share_format, {"table", "json", "csv"});
  share_cmd->footer(Footer("  tessctl share\n  tessctl share -o json"));

  DrainOptions drain;
  CLI::App* drain_cmd = app.add_subcommand(
      "drain",
      "Take a worker out of service (admin): it gets no new ranks, its running ranks "
      "checkpoint and exit, and their jobs requeue elsewhere without counting a "
      "restart. Ranks still running after the timeout are stopped");
  drain_cmd->add_option("worker", drain.worker, "Worker name (see tessctl workers)")
      ->required();
  drain_cmd
      ->add_option("--timeout", drain.timeout_s,
                   "Seconds to wait for the ranks to checkpoint and leave before they "
                   "are stopped (default: the coordinator's --drain-timeout, 120)")
      ->check(CLI::NonNegativeNumber);
  drain_cmd->footer(
      Footer("  tessctl drain node-3\n  tessctl drain node-3 --timeout 300"));
  DrainOptions undrain{.undrain = true};
  CLI::App* undrain_cmd =
      app.add_subcommand("undrain", "Return a drained worker to service (admin)");
  undrain_cmd->add_option("worker", undrain.worker, "Worker name")->required();
  undrain_cmd->footer(Footer("  tessctl undrain node-3"));

  WaitOptions wait;
  double wait_timeout_s = 0;
  CLI::App* wait_cmd = app.add_subcommand(
      "wait", "Wait until a job finishes; exit 0 if it SUCCEEDED, 1 if not");
  builder.AddId(wait_cmd, "job", &wait.job_id, "Job id");
  wait_cmd
      ->add_option("--timeout", wait_timeout_s,
                   "Give up after SECONDS and exit 124 (default: wait without limit)")
      ->check(CLI::NonNegativeNumber);
  wait_cmd->add_flag("--progress", wait.progress,
                     "Show epoch, step, loss, throughput and ETA (redrawn in place on a "
                     "terminal)");
  wait_cmd->footer(Footer("  tessctl wait 3\n  tessctl wait 3 --timeout 900 --progress"));

  CancelOptions cancel;
  CLI::App* cancel_cmd =
      app.add_subcommand("cancel", "Stop every rank of a job and record it CANCELLED");
  builder.AddId(cancel_cmd, "job", &cancel.job_id, "Job id");
  cancel_cmd->footer(Footer("  tessctl cancel 3"));

  LogsOptions logs;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "Print a rank's captured stdout and stderr (kept after its worker is gone)");
  builder.AddId(logs_cmd, "job", &logs.job_id, "Job id");
  logs_cmd->add_option("--rank", logs.rank, "Rank whose log to print")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  logs_cmd->add_option("--attempt", logs.attempt, "Attempt (default: the current one)")
      ->check(CLI::NonNegativeNumber);
  logs_cmd->add_flag("-f,--follow", logs.follow,
                     "Keep printing until the rank's log ends");
  logs_cmd->footer(Footer("  tessctl logs 3\n  tessctl logs 3 --rank 1 -f"));

  ExportOptions export_model;
  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "Write a job's trained model as safetensors with timm, Hugging Face or torchvision "
      "names (runs tessera-export on the job's checkpoint directory)");
  builder.AddId(export_cmd, "job", &export_model.job_id, "Job id");
  export_cmd
      ->add_option("--names", export_model.names, "timm | hf | torchvision | tessera")
      ->capture_default_str()
      ->check(CLI::IsMember({"timm", "hf", "torchvision", "tessera"}));
  export_cmd->add_option("-o,--out", export_model.out, "The safetensors file to write")
      ->required();
  export_cmd
      ->add_option("--step", export_model.step,
                   "Export this step's checkpoint (default: the latest)")
      ->check(CLI::PositiveNumber);
  export_cmd->add_option("--checkpoint", export_model.checkpoint,
                         "Read the checkpoints here instead of the spec's "
                         "trainer.checkpoint_dir (where it is mounted elsewhere)");
  export_cmd->add_option(
      "--exporter", export_model.exporter,
      "The tessera-export binary (default: beside tessctl, then $PATH)");
  export_cmd->footer(Footer(
      "  tessctl export 12 --names timm -o pets-vit.safetensors\n"
      "  tessctl export 12 --names torchvision --step 3000 -o "
      "vit-b16-step3000.safetensors\n"
      "Then in Python:\n"
      "  m = torchvision.models.vit_b_16(num_classes=37)\n"
      "  "
      "m.load_state_dict(safetensors.torch.load_file('vit-b16-step3000.safetensors'))"));

  MetricsOptions metrics;
  std::string metrics_format;
  CLI::App* metrics_cmd = app.add_subcommand("metrics", "Print a job's stored metrics");
  builder.AddId(metrics_cmd, "job", &metrics.job_id, "Job id");
  builder.AddFormatOption(metrics_cmd, &metrics_format, {"table", "json", "csv"});
  metrics_cmd->add_option("--name", metrics.name, "Only this metric, e.g. loss");
  metrics_cmd->footer(Footer(
      "  tessctl metrics 3 --name loss\n  tessctl metrics 3 -o csv > metrics.csv"));

  // ---- sweeps ----
  // `sweep FILE` is a shorthand for `sweep submit FILE`: CLI11 tries a word as a
  // subcommand of `sweep` first, so only a file literally named like one of them
  // needs the long form.
  SweepSubmitOptions sweep_submit;
  std::string sweep_file;
  std::vector<std::string> sweep_overrides;
  bool sweep_follow = false;
  CLI::App* sweep_cmd = app.add_subcommand(
      "sweep",
      "Run a scaling study: a grid of jobs (world size x batch size x scaling x shape, "
      "times repeats) and its report.\n`tessctl sweep FILE` is short for `tessctl "
      "sweep submit FILE`; the other subcommands inspect sweeps by id.");
  sweep_cmd->require_subcommand(0, 1);
  builder.AddFile(sweep_cmd, &sweep_file,
                  "Sweep spec YAML file (shorthand for `sweep submit FILE`)", false);
  sweep_cmd
      ->add_option("--set", sweep_overrides,
                   "With FILE: override a spec field, KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  sweep_cmd->add_flag("--follow", sweep_follow,
                      "With FILE: then show per-point progress until the sweep ends");
  sweep_cmd->footer(
      Footer("  tessctl sweep examples/sweep-vit-micro-2x2.yaml --follow\n"
             "  tessctl sweep submit examples/paper-study.yaml --set repeats=3\n"
             "  tessctl sweep list\n"
             "  tessctl sweep status 4\n"
             "  tessctl sweep report 4 -o csv > report.csv\n"
             "  tessctl sweep cancel 4"));

  CLI::App* sweep_submit_cmd = sweep_cmd->add_subcommand(
      "submit",
      "Validate a sweep spec locally and submit it; prints the number of points, then "
      "the sweep id last");
  builder.AddFile(sweep_submit_cmd, &sweep_submit.spec_path, "Sweep spec YAML file",
                  true);
  sweep_submit_cmd
      ->add_option("--set", sweep_submit.overrides,
                   "Override a spec field before validation, KEY=VALUE with KEY a dotted "
                   "path, e.g. base.trainer.epochs=1 (repeatable)")
      ->allow_extra_args(false);
  sweep_submit_cmd->add_flag("--follow", sweep_submit.follow,
                             "Then show per-point progress until the sweep ends");
  sweep_submit_cmd->footer(
      Footer("  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml\n"
             "  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml --follow\n"
             "  SWEEP=$(tessctl sweep submit study.yaml | tail -n1)"));

  SweepFollowOptions sweep_follow_only;
  CLI::App* sweep_follow_cmd = sweep_cmd->add_subcommand(
      "follow",
      "Show a sweep's per-point progress until it ends; exit 0 if it SUCCEEDED");
  builder.AddId(sweep_follow_cmd, "sweep", &sweep_follow_only.sweep_id, "Sweep id");
  sweep_follow_cmd->footer(Footer("  tessctl sweep follow 4"));

  ListOptions sweep_list;
  std::string sweep_list_format;
  CLI::App* sweep_list_cmd =
      sweep_cmd->add_subcommand("list", "List sweeps, newest first");
  builder.AddFormatOption(sweep_list_cmd, &sweep_list_format, {"table", "json", "csv"});
  sweep_list_cmd->footer(Footer("  tessctl sweep list\n  tessctl sweep list -o json"));

  SweepIdOptions sweep_status;
  std::string sweep_status_format;
  CLI::App* sweep_status_cmd = sweep_cmd->add_subcommand(
      "status", "Show a sweep's state and its points (coordinates, job, state)");
  builder.AddId(sweep_status_cmd, "sweep", &sweep_status.sweep_id, "Sweep id");
  builder.AddFormatOption(sweep_status_cmd, &sweep_status_format,
                          {"table", "json", "csv"});
  sweep_status_cmd->footer(
      Footer("  tessctl sweep status 4\n  tessctl sweep status 4 -o json | jq .state"));

  SweepIdOptions sweep_report;
  std::string sweep_report_format;
  CLI::App* sweep_report_cmd = sweep_cmd->add_subcommand(
      "report",
      "Per grid point: runs, epoch time mean ± std, speedup, efficiency, comm share "
      "and final accuracy (computed by the coordinator)");
  builder.AddId(sweep_report_cmd, "sweep", &sweep_report.sweep_id, "Sweep id");
  builder.AddFormatOption(sweep_report_cmd, &sweep_report_format,
                          {"table", "json", "csv"});
  sweep_report_cmd->footer(
      Footer("  tessctl sweep report 4\n  tessctl sweep report 4 -o csv > report.csv"));

  SweepIdOptions sweep_cancel;
  CLI::App* sweep_cancel_cmd = sweep_cmd->add_subcommand(
      "cancel", "Cancel a sweep's running points and submit no more");
  builder.AddId(sweep_cancel_cmd, "sweep", &sweep_cancel.sweep_id, "Sweep id");
  sweep_cancel_cmd->footer(Footer("  tessctl sweep cancel 4"));

  // ---- completion ----
  std::string shell;
  CLI::App* completion_cmd =
      app.add_subcommand("completion", "Print a shell completion script (bash)");
  completion_cmd->add_option("shell", shell, "Shell: bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  builder.AddPositionalWords(completion_cmd, {"bash"});
  completion_cmd->footer(
      Footer("  tessctl completion bash\n  source <(tessctl completion bash)\n"
             "  tessctl completion bash > /etc/bash_completion.d/tessctl"));

  // CLI11 consumes arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (completion_cmd->parsed()) {
    out << BashCompletionScript(app, builder.hints());
    return kExitOk;
  }
  const bool sweep_shorthand = !sweep_file.empty();
  const bool sweep_shorthand_options = !sweep_overrides.empty() || sweep_follow;
  if (sweep_cmd->parsed()) {
    if (sweep_cmd->get_subcommands().empty() && !sweep_shorthand) {
      err << "tessctl sweep: give a sweep spec FILE or a subcommand (submit, follow, "
             "list, status, report, cancel); see tessctl sweep --help\n";
      return kExitUsage;
    }
    if (!sweep_cmd->get_subcommands().empty() &&
        (sweep_shorthand || sweep_shorthand_options)) {
      err << "tessctl sweep: FILE, --set and --follow go with `sweep FILE` or `sweep "
             "submit FILE`, not with `sweep "
          << sweep_cmd->get_subcommands().front()->get_name() << "`\n";
      return kExitUsage;
    }
  }
  if (!token.empty()) {
    if (absl::Status valid = ValidateToken(token); !valid.ok()) {
      err << "tessctl: --token/$" << kTokenEnv << ": " << valid.message() << "\n";
      return kExitUsage;
    }
  }

  jobs.format = ToFormat(jobs_format);
  status.format = ToFormat(status_format);
  workers.format = ToFormat(workers_format);
  share.format = ToFormat(share_format);
  metrics.format = ToFormat(metrics_format);
  sweep_list.format = ToFormat(sweep_list_format);
  sweep_status.format = ToFormat(sweep_status_format);
  sweep_report.format = ToFormat(sweep_report_format);
  wait.timeout = absl::Seconds(wait_timeout_s);
  wait.live = terminal.is_tty;
  wait.columns = terminal.columns;
  submit.follow_options.progress = true;
  submit.follow_options.live = terminal.is_tty;
  submit.follow_options.columns = terminal.columns;
  if (sweep_shorthand) {
    sweep_submit.spec_path = sweep_file;
    sweep_submit.overrides = sweep_overrides;
    sweep_submit.follow = sweep_follow;
  }
  for (SweepFollowOptions* follow : {&sweep_submit.follow_options, &sweep_follow_only}) {
    follow->live = terminal.is_tty;
    follow->columns = terminal.columns;
  }

  std::unique_ptr<CoordinatorClient> client = make_client(ConnectionOptions{
      .address = coordinator, .token = token, .tls_ca_file = tls_ca, .tls_pin = tls_pin});
  if (submit_cmd->parsed()) return RunSubmit(submit, *client, out, err);
  if (jobs_cmd->parsed()) return RunJobs(jobs, *client, out, err);
  if (status_cmd->parsed()) return RunStatus(status, *client, out, err);
  if (workers_cmd->parsed()) return RunWorkers(workers, *client, out, err);
  if (share_cmd->parsed()) return RunShare(share, *client, out, err);
  if (drain_cmd->parsed()) return RunDrain(drain, *client, out, err);
  if (undrain_cmd->parsed()) return RunDrain(undrain, *client, out, err);
  if (wait_cmd->parsed()) return RunWait(wait, *client, out, err);
  if (metrics_cmd->parsed()) return RunMetrics(metrics, *client, out, err);
  if (cancel_cmd->parsed()) return RunCancel(cancel, *client, out, err);
  if (logs_cmd->parsed()) return RunLogs(logs, *client, out, err);
  if (export_cmd->parsed()) return RunExport(export_model, *client, out, err);
  if (sweep_shorthand || sweep_submit_cmd->parsed()) {
    return RunSweepSubmit(sweep_submit, *client, out, err);
  }
  if (sweep_follow_cmd->parsed())
    return RunSweepFollow(sweep_follow_only, *client, out, err);
  if (sweep_list_cmd->parsed()) return RunSweepList(sweep_list, *client, out, err);
  if (sweep_status_cmd->parsed()) return RunSweepStatus(sweep_status, *client, out, err);
  if (sweep_report_cmd->parsed()) return RunSweepReport(sweep_report, *client, out, err);
  if (sweep_cancel_cmd->parsed()) return RunSweepCancel(sweep_cancel, *client, out, err);
  err << "tessctl: no command given; see tessctl --help\n";
  return kExitUsage;
}

}  // namespace tessera::cli
