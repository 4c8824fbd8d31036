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
#include "cli/eval_command.h"
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

// The tessctl command tree: the root's global options, every subcommand's
// CLI11 node, and the option structs their flags fill. Declare() builds it in
// the order help lists the commands; after parsing, CheckUsage(), Finish() and
// Dispatch() run the chosen command. CLI11 keeps the addresses of the members,
// so a table is neither copied nor moved.
class CommandTable {
 public:
  explicit CommandTable(CLI::App& app) : app_(app) {}
  CommandTable(const CommandTable&) = delete;
  CommandTable& operator=(const CommandTable&) = delete;

  void Declare() {
    DeclareRoot();
    AddSubmit();
    AddJobs();
    AddStatus();
    AddWorkers();
    AddShare();
    AddDrain();
    AddWait();
    AddCancel();
    AddLogs();
    AddExport();
    AddEval();
    AddMetrics();
    AddSweep();
    AddCompletion();
  }

  bool completion_requested() const { return completion_cmd_->parsed(); }
  std::string CompletionScript() const {
    return BashCompletionScript(app_, builder_.hints());
  }

  // The usage errors CLI11 cannot express; prints one and returns false.
  bool CheckUsage(std::ostream& err) const {
    if (!CheckSweepUsage(err)) return false;
    if (!token_.empty()) {
      if (absl::Status valid = ValidateToken(token_); !valid.ok()) {
        err << "tessctl: --token/$" << kTokenEnv << ": " << valid.message() << "\n";
        return false;
      }
    }
    return true;
  }

  // Fills the options that come from the parsed flags' spellings and from the
  // terminal.
  void Finish(const Terminal& terminal);

  ConnectionOptions connection() const {
    return ConnectionOptions{.address = coordinator_,
                             .token = token_,
                             .tls_ca_file = tls_ca_,
                             .tls_pin = tls_pin_};
  }

  // Runs the parsed command and returns its exit code.
  int Dispatch(CoordinatorClient& client, std::ostream& out, std::ostream& err);

 private:
  bool sweep_shorthand() const { return !sweep_file_.empty(); }

  // Program description, footer and the options every command takes.
  void DeclareRoot();
  // ---- jobs and workers ----
  void AddSubmit();
  void AddJobs();
  void AddStatus();
  void AddWorkers();
  void AddShare();
  void AddDrain();
  void AddWait();
  void AddCancel();
  void AddLogs();
  void AddExport();
  void AddEval();
  void AddMetrics();
  // ---- sweeps ----
  void AddSweep();
  void AddSweepSubmit();
  void AddSweepFollow();
  void AddSweepList();
  void AddSweepStatus();
  void AddSweepReport();
  void AddSweepCancel();
  bool CheckSweepUsage(std::ostream& err) const;
  // ---- completion ----
  void AddCompletion();

  CLI::App& app_;
  Builder builder_;

  std::string coordinator_ = kDefaultCoordinator;
  std::string token_;
  std::string tls_ca_;
  std::string tls_pin_;

  SubmitOptions submit_;
  CLI::App* submit_cmd_ = nullptr;
  JobsOptions jobs_;
  std::string jobs_format_;
  CLI::App* jobs_cmd_ = nullptr;
  StatusOptions status_;
  std::string status_format_;
  CLI::App* status_cmd_ = nullptr;
  ListOptions workers_;
  std::string workers_format_;
  CLI::App* workers_cmd_ = nullptr;
  ListOptions share_;
  std::string share_format_;
  CLI::App* share_cmd_ = nullptr;
  DrainOptions drain_;
  CLI::App* drain_cmd_ = nullptr;
  DrainOptions undrain_{.undrain = true};
  CLI::App* undrain_cmd_ = nullptr;
  WaitOptions wait_;
  double wait_timeout_s_ = 0;
  CLI::App* wait_cmd_ = nullptr;
  CancelOptions cancel_;
  CLI::App* cancel_cmd_ = nullptr;
  LogsOptions logs_;
  CLI::App* logs_cmd_ = nullptr;
  ExportOptions export_;
  CLI::App* export_cmd_ = nullptr;
  EvalOptions eval_;
  CLI::App* eval_cmd_ = nullptr;
  MetricsOptions metrics_;
  std::string metrics_format_;
  CLI::App* metrics_cmd_ = nullptr;

  // `sweep FILE` with its own --set and --follow.
  std::string sweep_file_;
  std::vector<std::string> sweep_overrides_;
  bool sweep_follow_ = false;
  CLI::App* sweep_cmd_ = nullptr;
  SweepSubmitOptions sweep_submit_;
  CLI::App* sweep_submit_cmd_ = nullptr;
  SweepFollowOptions sweep_follow_only_;
  CLI::App* sweep_follow_cmd_ = nullptr;
  ListOptions sweep_list_;
  std::string sweep_list_format_;
  CLI::App* sweep_list_cmd_ = nullptr;
  SweepIdOptions sweep_status_;
  std::string sweep_status_format_;
  CLI::App* sweep_status_cmd_ = nullptr;
  SweepIdOptions sweep_report_;
  std::string sweep_report_format_;
  CLI::App* sweep_report_cmd_ = nullptr;
  SweepIdOptions sweep_cancel_;
  CLI::App* sweep_cancel_cmd_ = nullptr;

  std::string shell_;
  CLI::App* completion_cmd_ = nullptr;
};

void CommandTable::DeclareRoot() {
  app_.require_subcommand(1);
  // Global options may also follow the subcommand.
  app_.fallthrough();
  app_.footer(
      Footer("  tessctl submit examples/fmnist-2rank.yaml --follow\n"
             "  tessctl --coordinator 10.0.0.5:50051 jobs --state running -o json\n"
             "  tessctl sweep examples/sweep-vit-micro-2x2.yaml\n"
             "  source <(tessctl completion bash)"));
  app_.add_option("--coordinator", coordinator_,
                  absl::StrCat("Coordinator gRPC address HOST:PORT (default: $",
                               kCoordinatorEnv, ", then ", kDefaultCoordinator, ")"))
      ->envname(kCoordinatorEnv);
  // No default shown: the token must never appear in help or messages.
  app_.add_option("--token", token_,
                  absl::StrCat("Bearer token sent with every request (default: $",
                               kTokenEnv, ")"))
      ->envname(kTokenEnv);
  app_.add_option("--tls-ca", tls_ca_,
                  absl::StrCat("PEM roots that verify the coordinator's TLS certificate "
                               "(default: $",
                               kTlsCaEnv, ")"))
      ->envname(kTlsCaEnv);
  app_.add_option("--tls-pin", tls_pin_,
                  absl::StrCat("SHA-256 of the coordinator's self-signed certificate "
                               "(default: $",
                               kTlsPinEnv, ", then the pin the token carries)"))
      ->envname(kTlsPinEnv);
}

void CommandTable::AddSubmit() {
  submit_cmd_ = app_.add_subcommand(
      "submit", "Validate a job spec locally and submit it; prints the job id last");
  builder_.AddFile(submit_cmd_, &submit_.spec_path, "Job spec YAML file", true);
  submit_cmd_
      ->add_option("--set", submit_.overrides,
                   "Override a spec field before validation, KEY=VALUE with KEY a dotted "
                   "path (repeatable)")
      ->allow_extra_args(false);
  submit_cmd_->add_flag("--follow", submit_.follow,
                        "Then show the job's progress until it ends and exit as `wait` "
                        "does");
  submit_cmd_->footer(Footer(
      "  tessctl submit examples/fmnist-2rank.yaml\n"
      "  tessctl submit examples/fmnist-2rank.yaml --set trainer.epochs=2 "
      "--set world_size=4\n"
      "  tessctl submit examples/fmnist-2rank.yaml --follow\n"
      "  JOB=$(tessctl submit job.yaml | tail -n1) && tessctl wait \"$JOB\" --progress"));
}

void CommandTable::AddJobs() {
  jobs_cmd_ = app_.add_subcommand("jobs", "List jobs, newest first");
  builder_.AddFormatOption(jobs_cmd_, &jobs_format_, {"table", "json", "csv"});
  jobs_cmd_->add_option(
      "--state", jobs_.state,
      absl::StrCat("Only jobs in this state: ", absl::StrJoin(JobStateNames(), "|"),
                   " (any case, JOB_STATE_ prefix optional)"));
  builder_.AddChoices(jobs_cmd_, {"--state"}, LowerStateNames());
  jobs_cmd_
      ->add_option("--limit", jobs_.limit,
                   "At most N jobs, newest first (0: the coordinator's page, 100)")
      ->check(CLI::NonNegativeNumber);
  jobs_cmd_
      ->add_option("--before", jobs_.before_id,
                   "Paging: only jobs older than this id (printed when there are more)")
      ->check(CLI::PositiveNumber);
  jobs_cmd_->add_option(
      "--owner", jobs_.owner,
      "Only this user's jobs (admins; others always see only their own)");
  jobs_cmd_->add_option("--sweep", jobs_.sweep_id, "Only the points of this sweep")
      ->check(CLI::PositiveNumber);
  jobs_cmd_->footer(Footer(
      "  tessctl jobs\n  tessctl jobs --state running --limit 10\n"
      "  tessctl jobs --before 120\n  tessctl jobs --owner alice   # admins\n"
      "  tessctl jobs -o json | jq '.[0].state'\n  tessctl jobs -o csv > jobs.csv"));
}

void CommandTable::AddStatus() {
  status_cmd_ =
      app_.add_subcommand("status", "Show one job: state, reason, spec and ranks");
  builder_.AddId(status_cmd_, "job", &status_.job_id, "Job id");
  builder_.AddFormatOption(status_cmd_, &status_format_, {"table", "json"});
  status_cmd_->footer(
      Footer("  tessctl status 3\n  tessctl status 3 -o json | jq -r .state"));
}

void CommandTable::AddWorkers() {
  workers_cmd_ =
      app_.add_subcommand("workers", "List registered workers and their slots");
  builder_.AddFormatOption(workers_cmd_, &workers_format_, {"table", "json", "csv"});
  workers_cmd_->footer(Footer("  tessctl workers\n  tessctl workers -o json"));
}

void CommandTable::AddShare() {
  share_cmd_ = app_.add_subcommand(
      "share",
      "Show recent usage (slot-seconds, decayed) and fair-share factor: your own, or "
      "every user's for an admin. Equal-priority jobs of users with a higher factor "
      "start first");
  builder_.AddFormatOption(share_cmd_, &share_format_, {"table", "json", "csv"});
  share_cmd_->footer(Footer("  tessctl share\n  tessctl share -o json"));
}

// `drain` and its inverse `undrain`.
void CommandTable::AddDrain() {
  drain_cmd_ = app_.add_subcommand(
      "drain",
      "Take a worker out of service (admin): it gets no new ranks, its running ranks "
      "checkpoint and exit, and their jobs requeue elsewhere without counting a "
      "restart. Ranks still running after the timeout are stopped");
  drain_cmd_->add_option("worker", drain_.worker, "Worker name (see tessctl workers)")
      ->required();
  drain_cmd_
      ->add_option("--timeout", drain_.timeout_s,
                   "Seconds to wait for the ranks to checkpoint and leave before they "
                   "are stopped (default: the coordinator's --drain-timeout, 120)")
      ->check(CLI::NonNegativeNumber);
  drain_cmd_->footer(
      Footer("  tessctl drain node-3\n  tessctl drain node-3 --timeout 300"));
  undrain_cmd_ =
      app_.add_subcommand("undrain", "Return a drained worker to service (admin)");
  undrain_cmd_->add_option("worker", undrain_.worker, "Worker name")->required();
  undrain_cmd_->footer(Footer("  tessctl undrain node-3"));
}

void CommandTable::AddWait() {
  wait_cmd_ = app_.add_subcommand(
      "wait", "Wait until a job finishes; exit 0 if it SUCCEEDED, 1 if not");
  builder_.AddId(wait_cmd_, "job", &wait_.job_id, "Job id");
  wait_cmd_
      ->add_option("--timeout", wait_timeout_s_,
                   "Give up after SECONDS and exit 124 (default: wait without limit)")
      ->check(CLI::NonNegativeNumber);
  wait_cmd_->add_flag("--progress", wait_.progress,
                      "Show epoch, step, loss, throughput and ETA (redrawn in place on a "
                      "terminal)");
  wait_cmd_->footer(
      Footer("  tessctl wait 3\n  tessctl wait 3 --timeout 900 --progress"));
}

void CommandTable::AddCancel() {
  cancel_cmd_ =
      app_.add_subcommand("cancel", "Stop every rank of a job and record it CANCELLED");
  builder_.AddId(cancel_cmd_, "job", &cancel_.job_id, "Job id");
  cancel_cmd_->footer(Footer("  tessctl cancel 3"));
}

void CommandTable::AddLogs() {
  logs_cmd_ = app_.add_subcommand(
      "logs",
      "Print a rank's captured stdout and stderr (kept after its worker is gone)");
  builder_.AddId(logs_cmd_, "job", &logs_.job_id, "Job id");
  logs_cmd_->add_option("--rank", logs_.rank, "Rank whose log to print")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  logs_cmd_->add_option("--attempt", logs_.attempt, "Attempt (default: the current one)")
      ->check(CLI::NonNegativeNumber);
  logs_cmd_->add_flag("-f,--follow", logs_.follow,
                      "Keep printing until the rank's log ends");
  logs_cmd_->footer(Footer("  tessctl logs 3\n  tessctl logs 3 --rank 1 -f"));
}

void CommandTable::AddExport() {
  export_cmd_ = app_.add_subcommand(
      "export",
      "Write a job's trained model as safetensors with timm, Hugging Face or torchvision "
      "names (runs tessera-export on the job's checkpoint directory)");
  builder_.AddId(export_cmd_, "job", &export_.job_id, "Job id");
  export_cmd_->add_option("--names", export_.names, "timm | hf | torchvision | tessera")
      ->capture_default_str()
      ->check(CLI::IsMember({"timm", "hf", "torchvision", "tessera"}));
  export_cmd_->add_option("-o,--out", export_.out, "The safetensors file to write")
      ->required();
  export_cmd_
      ->add_option("--step", export_.step,
                   "Export this step's checkpoint (default: the latest)")
      ->check(CLI::PositiveNumber);
  export_cmd_->add_option("--checkpoint", export_.checkpoint,
                          "Read the checkpoints here instead of the spec's "
                          "trainer.checkpoint_dir (where it is mounted elsewhere)");
  export_cmd_->add_option(
      "--exporter", export_.exporter,
      "The tessera-export binary (default: beside tessctl, then $PATH)");
  export_cmd_->footer(Footer(
      "  tessctl export 12 --names timm -o pets-vit.safetensors\n"
      "  tessctl export 12 --names torchvision --step 3000 -o "
      "vit-b16-step3000.safetensors\n"
      "Then in Python:\n"
      "  m = torchvision.models.vit_b_16(num_classes=37)\n"
      "  "
      "m.load_state_dict(safetensors.torch.load_file('vit-b16-step3000.safetensors'))"));
}

void CommandTable::AddEval() {
  eval_cmd_ = app_.add_subcommand(
      "eval",
      "Submit a job of kind eval: a job's checkpoint or a safetensors file evaluated on "
      "one split (top-1, top-5, loss, per-class accuracy, confusion matrix)");
  eval_cmd_->add_option("job", eval_.job_id, "Job whose checkpoint to evaluate")
      ->check(CLI::PositiveNumber);
  eval_cmd_
      ->add_option("--step", eval_.step, "Its checkpoint of this step (default: latest)")
      ->check(CLI::PositiveNumber);
  eval_cmd_->add_option("--from", eval_.from,
                        "Or a safetensors file (timm, Hugging Face, torchvision or "
                        "Tessera names) under the workers' data roots");
  eval_cmd_->add_option("--model", eval_.model, "With --from: the model preset");
  eval_cmd_->add_option("--dataset", eval_.dataset, "With --from: the data's kind")
      ->capture_default_str();
  eval_cmd_
      ->add_option("--names", eval_.names,
                   "With --from: auto | timm | hf | "
                   "torchvision | tessera")
      ->capture_default_str();
  eval_cmd_->add_option("--image-size", eval_.image_size,
                        "With --from: the model's input size (default: the preset's)");
  eval_cmd_->add_option("--data", eval_.data_dir,
                        "The data folder (default: the job's; required with --from)");
  eval_cmd_->add_option("--split", eval_.split, "test | val | train (default: test)")
      ->check(CLI::IsMember({"test", "val", "train"}));
  eval_cmd_->add_option("--world-size", eval_.world_size, "Ranks that share the split")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  eval_cmd_
      ->add_option("--device", eval_.device, "auto | cpu | cuda (default: the job's)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  eval_cmd_->add_option("--name", eval_.name, "The eval job's name");
  eval_cmd_->add_flag(
      "--follow", eval_.submit.follow,
      "Then show the job's progress until it ends and exit as `wait` does");
  eval_cmd_->footer(
      Footer("  tessctl eval 12\n"
             "  tessctl eval 12 --step 3000 --data /data/pets --split val\n"
             "  tessctl eval --from /data/models/vit.safetensors --model vit-ti16 --data "
             "/data/pets\n"
             "  tessctl status JOB -o json | jq .ranks[0].eval"));
}

void CommandTable::AddMetrics() {
  metrics_cmd_ = app_.add_subcommand("metrics", "Print a job's stored metrics");
  builder_.AddId(metrics_cmd_, "job", &metrics_.job_id, "Job id");
  builder_.AddFormatOption(metrics_cmd_, &metrics_format_, {"table", "json", "csv"});
  metrics_cmd_->add_option("--name", metrics_.name, "Only this metric, e.g. loss");
  metrics_cmd_->footer(Footer(
      "  tessctl metrics 3 --name loss\n  tessctl metrics 3 -o csv > metrics.csv"));
}

// `sweep FILE` is a shorthand for `sweep submit FILE`: CLI11 tries a word as a
// subcommand of `sweep` first, so only a file literally named like one of them
// needs the long form.
void CommandTable::AddSweep() {
  sweep_cmd_ = app_.add_subcommand(
      "sweep",
      "Run a scaling study: a grid of jobs (world size x batch size x scaling x shape, "
      "times repeats) and its report.\n`tessctl sweep FILE` is short for `tessctl "
      "sweep submit FILE`; the other subcommands inspect sweeps by id.");
  sweep_cmd_->require_subcommand(0, 1);
  builder_.AddFile(sweep_cmd_, &sweep_file_,
                   "Sweep spec YAML file (shorthand for `sweep submit FILE`)", false);
  sweep_cmd_
      ->add_option("--set", sweep_overrides_,
                   "With FILE: override a spec field, KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  sweep_cmd_->add_flag("--follow", sweep_follow_,
                       "With FILE: then show per-point progress until the sweep ends");
  sweep_cmd_->footer(
      Footer("  tessctl sweep examples/sweep-vit-micro-2x2.yaml --follow\n"
             "  tessctl sweep submit examples/paper-study.yaml --set repeats=3\n"
             "  tessctl sweep list\n"
             "  tessctl sweep status 4\n"
             "  tessctl sweep report 4 -o csv > report.csv\n"
             "  tessctl sweep cancel 4"));
  AddSweepSubmit();
  AddSweepFollow();
  AddSweepList();
  AddSweepStatus();
  AddSweepReport();
  AddSweepCancel();
}

void CommandTable::AddSweepSubmit() {
  sweep_submit_cmd_ = sweep_cmd_->add_subcommand(
      "submit",
      "Validate a sweep spec locally and submit it; prints the number of points, then "
      "the sweep id last");
  builder_.AddFile(sweep_submit_cmd_, &sweep_submit_.spec_path, "Sweep spec YAML file",
                   true);
  sweep_submit_cmd_
      ->add_option("--set", sweep_submit_.overrides,
                   "Override a spec field before validation, KEY=VALUE with KEY a dotted "
                   "path, e.g. base.trainer.epochs=1 (repeatable)")
      ->allow_extra_args(false);
  sweep_submit_cmd_->add_flag("--follow", sweep_submit_.follow,
                              "Then show per-point progress until the sweep ends");
  sweep_submit_cmd_->footer(
      Footer("  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml\n"
             "  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml --follow\n"
             "  SWEEP=$(tessctl sweep submit study.yaml | tail -n1)"));
}

void CommandTable::AddSweepFollow() {
  sweep_follow_cmd_ = sweep_cmd_->add_subcommand(
      "follow",
      "Show a sweep's per-point progress until it ends; exit 0 if it SUCCEEDED");
  builder_.AddId(sweep_follow_cmd_, "sweep", &sweep_follow_only_.sweep_id, "Sweep id");
  sweep_follow_cmd_->footer(Footer("  tessctl sweep follow 4"));
}

void CommandTable::AddSweepList() {
  sweep_list_cmd_ = sweep_cmd_->add_subcommand("list", "List sweeps, newest first");
  builder_.AddFormatOption(sweep_list_cmd_, &sweep_list_format_,
                           {"table", "json", "csv"});
  sweep_list_cmd_->footer(Footer("  tessctl sweep list\n  tessctl sweep list -o json"));
}

void CommandTable::AddSweepStatus() {
  sweep_status_cmd_ = sweep_cmd_->add_subcommand(
      "status", "Show a sweep's state and its points (coordinates, job, state)");
  builder_.AddId(sweep_status_cmd_, "sweep", &sweep_status_.sweep_id, "Sweep id");
  builder_.AddFormatOption(sweep_status_cmd_, &sweep_status_format_,
                           {"table", "json", "csv"});
  sweep_status_cmd_->footer(
      Footer("  tessctl sweep status 4\n  tessctl sweep status 4 -o json | jq .state"));
}

void CommandTable::AddSweepReport() {
  sweep_report_cmd_ = sweep_cmd_->add_subcommand(
      "report",
      "Per grid point: runs, epoch time mean ± std, speedup, efficiency, comm share "
      "and final accuracy (computed by the coordinator)");
  builder_.AddId(sweep_report_cmd_, "sweep", &sweep_report_.sweep_id, "Sweep id");
  builder_.AddFormatOption(sweep_report_cmd_, &sweep_report_format_,
                           {"table", "json", "csv"});
  sweep_report_cmd_->footer(
      Footer("  tessctl sweep report 4\n  tessctl sweep report 4 -o csv > report.csv"));
}

void CommandTable::AddSweepCancel() {
  sweep_cancel_cmd_ = sweep_cmd_->add_subcommand(
      "cancel", "Cancel a sweep's running points and submit no more");
  builder_.AddId(sweep_cancel_cmd_, "sweep", &sweep_cancel_.sweep_id, "Sweep id");
  sweep_cancel_cmd_->footer(Footer("  tessctl sweep cancel 4"));
}

// `sweep` needs a FILE or a subcommand, and the shorthand's options go with
// the shorthand only.
bool CommandTable::CheckSweepUsage(std::ostream& err) const {
  if (!sweep_cmd_->parsed()) return true;
  const bool shorthand_options = !sweep_overrides_.empty() || sweep_follow_;
  if (sweep_cmd_->get_subcommands().empty() && !sweep_shorthand()) {
    err << "tessctl sweep: give a sweep spec FILE or a subcommand (submit, follow, "
           "list, status, report, cancel); see tessctl sweep --help\n";
    return false;
  }
  if (!sweep_cmd_->get_subcommands().empty() &&
      (sweep_shorthand() || shorthand_options)) {
    err << "tessctl sweep: FILE, --set and --follow go with `sweep FILE` or `sweep "
           "submit FILE`, not with `sweep "
        << sweep_cmd_->get_subcommands().front()->get_name() << "`\n";
    return false;
  }
  return true;
}

void CommandTable::AddCompletion() {
  completion_cmd_ =
      app_.add_subcommand("completion", "Print a shell completion script (bash)");
  completion_cmd_->add_option("shell", shell_, "Shell: bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  builder_.AddPositionalWords(completion_cmd_, {"bash"});
  completion_cmd_->footer(
      Footer("  tessctl completion bash\n  source <(tessctl completion bash)\n"
             "  tessctl completion bash > /etc/bash_completion.d/tessctl"));
}

void CommandTable::Finish(const Terminal& terminal) {
  jobs_.format = ToFormat(jobs_format_);
  status_.format = ToFormat(status_format_);
  workers_.format = ToFormat(workers_format_);
  share_.format = ToFormat(share_format_);
  metrics_.format = ToFormat(metrics_format_);
  sweep_list_.format = ToFormat(sweep_list_format_);
  sweep_status_.format = ToFormat(sweep_status_format_);
  sweep_report_.format = ToFormat(sweep_report_format_);
  wait_.timeout = absl::Seconds(wait_timeout_s_);
  wait_.live = terminal.is_tty;
  wait_.columns = terminal.columns;
  submit_.follow_options.progress = true;
  submit_.follow_options.live = terminal.is_tty;
  submit_.follow_options.columns = terminal.columns;
  eval_.submit.follow_options = submit_.follow_options;
  if (sweep_shorthand()) {
    sweep_submit_.spec_path = sweep_file_;
    sweep_submit_.overrides = sweep_overrides_;
    sweep_submit_.follow = sweep_follow_;
  }
  for (SweepFollowOptions* follow :
       {&sweep_submit_.follow_options, &sweep_follow_only_}) {
    follow->live = terminal.is_tty;
    follow->columns = terminal.columns;
  }
}

int CommandTable::Dispatch(CoordinatorClient& client, std::ostream& out,
                           std::ostream& err) {
  if (submit_cmd_->parsed()) return RunSubmit(submit_, client, out, err);
  if (jobs_cmd_->parsed()) return RunJobs(jobs_, client, out, err);
  if (status_cmd_->parsed()) return RunStatus(status_, client, out, err);
  if (workers_cmd_->parsed()) return RunWorkers(workers_, client, out, err);
  if (share_cmd_->parsed()) return RunShare(share_, client, out, err);
  if (drain_cmd_->parsed()) return RunDrain(drain_, client, out, err);
  if (undrain_cmd_->parsed()) return RunDrain(undrain_, client, out, err);
  if (wait_cmd_->parsed()) return RunWait(wait_, client, out, err);
  if (metrics_cmd_->parsed()) return RunMetrics(metrics_, client, out, err);
  if (cancel_cmd_->parsed()) return RunCancel(cancel_, client, out, err);
  if (logs_cmd_->parsed()) return RunLogs(logs_, client, out, err);
  if (export_cmd_->parsed()) return RunExport(export_, client, out, err);
  if (eval_cmd_->parsed()) return RunEval(eval_, client, out, err);
  if (sweep_shorthand() || sweep_submit_cmd_->parsed()) {
    return RunSweepSubmit(sweep_submit_, client, out, err);
  }
  if (sweep_follow_cmd_->parsed()) {
    return RunSweepFollow(sweep_follow_only_, client, out, err);
  }
  if (sweep_list_cmd_->parsed()) return RunSweepList(sweep_list_, client, out, err);
  if (sweep_status_cmd_->parsed()) return RunSweepStatus(sweep_status_, client, out, err);
  if (sweep_report_cmd_->parsed()) return RunSweepReport(sweep_report_, client, out, err);
  if (sweep_cancel_cmd_->parsed()) return RunSweepCancel(sweep_cancel_, client, out, err);
  err << "tessctl: no command given; see tessctl --help\n";
  return kExitUsage;
}

}  // namespace

int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err, const Terminal& terminal) {
  CLI::App app("tessctl: submit and inspect Tessera training jobs and sweeps.",
               "tessctl");
  CommandTable commands(app);
  commands.Declare();

  // CLI11 consumes arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (commands.completion_requested()) {
    out << commands.CompletionScript();
    return kExitOk;
  }
  if (!commands.CheckUsage(err)) return kExitUsage;
  commands.Finish(terminal);
  std::unique_ptr<CoordinatorClient> client = make_client(commands.connection());
  return commands.Dispatch(*client, out, err);
}

}  // namespace tessera::cli
