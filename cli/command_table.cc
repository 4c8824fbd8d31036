#include "cli/command_table.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/eval_command.h"
#include "cli/exit_codes.h"
#include "cli/export_command.h"
#include "cli/search_commands.h"
#include "cli/sweep_commands.h"
#include "common/flag_checks.h"
#include "common/job_state.h"

namespace tessera::cli {

namespace {

std::vector<std::string> LowerStateNames() {
  std::vector<std::string> names = JobStateNames();
  for (std::string& name : names) name = absl::AsciiStrToLower(name);
  return names;
}

// `submit --follow` and `eval --follow` wait as `wait --progress` does.
void FollowWithProgress(CommandFlags& f, WaitOptions& follow) {
  f.AfterParse([&follow](const Terminal& terminal) {
    follow.progress = true;
    follow.live = terminal.is_tty;
    follow.columns = terminal.columns;
  });
}

// `sweep follow`, `search follow` and their submits' --follow redraw their
// status line in place on a terminal (follow.h).
void FollowOnTerminal(CommandFlags& f, FollowOptions& follow) {
  f.AfterParse([&follow](const Terminal& terminal) {
    follow.live = terminal.is_tty;
    follow.columns = terminal.columns;
  });
}

// A group with a FILE shorthand (`sweep FILE`, `search FILE`) needs a FILE or
// a subcommand, and the shorthand's options (`options`, e.g. "FILE and --set")
// go with the shorthand only.
bool CheckShorthandUsage(const CLI::App& group, bool has_file, bool shorthand_options,
                         std::string_view subcommands, std::string_view options,
                         std::ostream& err) {
  const std::string name = group.get_name();
  if (group.get_subcommands().empty() && !has_file) {
    err << "tessctl " << name << ": give a " << name << " spec FILE or a subcommand ("
        << subcommands << "); see tessctl " << name << " --help\n";
    return false;
  }
  if (!group.get_subcommands().empty() && (has_file || shorthand_options)) {
    err << "tessctl " << name << ": " << options << " go with `" << name << " FILE` or `"
        << name << " submit FILE`, not with `" << name << " "
        << group.get_subcommands().front()->get_name() << "`\n";
    return false;
  }
  return true;
}

bool CheckSweepUsage(const SweepSubmitOptions& shorthand, const CLI::App& sweep,
                     std::ostream& err) {
  return CheckShorthandUsage(sweep, !shorthand.spec_path.empty(),
                             !shorthand.overrides.empty() || shorthand.follow,
                             "submit, follow, list, status, report, cancel",
                             "FILE, --set and --follow", err);
}

bool CheckSearchUsage(const SearchSubmitOptions& shorthand, const CLI::App& search,
                      std::ostream& err) {
  return CheckShorthandUsage(search, !shorthand.spec_path.empty(),
                             !shorthand.overrides.empty() || shorthand.follow,
                             "submit, follow, list, status, report, cancel, best",
                             "FILE, --set and --follow", err);
}

constexpr CommandRow kCommands[] = {
    // ---- jobs and workers ----
    {.path = "submit",
     .summary = "Validate a job spec locally and submit it; prints the job id last",
     .examples = "  tessctl submit examples/fmnist-2rank.yaml\n"
                 "  tessctl submit examples/fmnist-2rank.yaml --set trainer.epochs=2 "
                 "--set world_size=4\n"
                 "  tessctl submit examples/fmnist-2rank.yaml --follow\n"
                 "  JOB=$(tessctl submit job.yaml | tail -n1) && tessctl wait \"$JOB\" "
                 "--progress",
     .declare =
         [](CommandFlags& f) {
           SubmitOptions& o = f.Options<SubmitOptions>();
           f.File(&o.spec_path, "Job spec YAML file", true);
           f.SpecOverrides(&o.overrides,
                           "Override a spec field before validation, KEY=VALUE with KEY "
                           "a dotted path (repeatable)");
           f.app().add_flag(
               "--follow", o.follow,
               "Then show the job's progress until it ends and exit as `wait` does");
           FollowWithProgress(f, o.follow_options);
           f.Run(RunSubmit, o);
         }},
    {.path = "jobs",
     .summary = "List jobs, newest first",
     .examples = "  tessctl jobs\n  tessctl jobs --state running --limit 10\n"
                 "  tessctl jobs --before 120\n  tessctl jobs --owner alice   # admins\n"
                 "  tessctl jobs -o json | jq '.[0].state'\n"
                 "  tessctl jobs -o csv > jobs.csv",
     .declare =
         [](CommandFlags& f) {
           JobsOptions& o = f.Options<JobsOptions>();
           f.Format(&o.format, {"table", "json", "csv"});
           f.app().add_option("--state", o.state,
                              absl::StrCat("Only jobs in this state: ",
                                           absl::StrJoin(JobStateNames(), "|"),
                                           " (any case, JOB_STATE_ prefix optional)"));
           f.Choices({"--state"}, LowerStateNames());
           f.app()
               .add_option(
                   "--limit", o.limit,
                   "At most N jobs, newest first (0: the coordinator's page, 100)")
               ->check(NumberAtLeast<int32_t>(0));
           f.app()
               .add_option(
                   "--before", o.before_id,
                   "Paging: only jobs older than this id (printed when there are more)")
               ->check(NumberAtLeast<int64_t>(1));
           f.app().add_option(
               "--owner", o.owner,
               "Only this user's jobs (admins; others always see only their own)");
           f.app()
               .add_option("--sweep", o.sweep_id, "Only the points of this sweep")
               ->check(NumberAtLeast<int64_t>(1));
           f.Run(RunJobs, o);
         }},
    {.path = "status",
     .summary = "Show one job: state, reason, spec and ranks",
     .examples = "  tessctl status 3\n  tessctl status 3 -o json | jq -r .state",
     .declare =
         [](CommandFlags& f) {
           StatusOptions& o = f.Options<StatusOptions>();
           f.Id("job", &o.job_id, "Job id");
           f.Format(&o.format, {"table", "json"});
           f.Run(RunStatus, o);
         }},
    {.path = "workers",
     .summary = "List registered workers and their slots",
     .examples = "  tessctl workers\n  tessctl workers -o json",
     .declare =
         [](CommandFlags& f) {
           ListOptions& o = f.Options<ListOptions>();
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunWorkers, o);
         }},
    {.path = "share",
     .summary =
         "Show recent usage (slot-seconds, decayed) and fair-share factor: your own, or "
         "every user's for an admin. Equal-priority jobs of users with a higher factor "
         "start first",
     .examples = "  tessctl share\n  tessctl share -o json",
     .declare =
         [](CommandFlags& f) {
           ListOptions& o = f.Options<ListOptions>();
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunShare, o);
         }},
    {.path = "drain",
     .summary =
         "Take a worker out of service (admin): it gets no new ranks, its running "
         "ranks checkpoint and exit, and their jobs requeue elsewhere without counting "
         "a restart. Ranks still running after the timeout are stopped",
     .examples = "  tessctl drain node-3\n  tessctl drain node-3 --timeout 300",
     .declare =
         [](CommandFlags& f) {
           DrainOptions& o = f.Options<DrainOptions>();
           f.app()
               .add_option("worker", o.worker, "Worker name (see tessctl workers)")
               ->required();
           f.app()
               .add_option("--timeout", o.timeout_s,
                           "Seconds to wait for the ranks to checkpoint and leave before "
                           "they are stopped (default: the coordinator's "
                           "--drain-timeout, 120)")
               ->check(NumberAtLeast<double>(0));
           f.Run(RunDrain, o);
         }},
    {.path = "undrain",
     .summary = "Return a drained worker to service (admin)",
     .examples = "  tessctl undrain node-3",
     .declare =
         [](CommandFlags& f) {
           DrainOptions& o = f.Options<DrainOptions>({.undrain = true});
           f.app().add_option("worker", o.worker, "Worker name")->required();
           f.Run(RunDrain, o);
         }},
    {.path = "wait",
     .summary = "Wait until a job finishes; exit 0 if it SUCCEEDED, 1 if not",
     .examples = "  tessctl wait 3\n  tessctl wait 3 --timeout 900 --progress",
     .declare =
         [](CommandFlags& f) {
           WaitOptions& o = f.Options<WaitOptions>();
           double& timeout_s = f.Options<double>(0);
           f.Id("job", &o.job_id, "Job id");
           f.app()
               .add_option(
                   "--timeout", timeout_s,
                   "Give up after SECONDS and exit 124 (default: wait without limit)")
               ->check(NumberAtLeast<double>(0));
           f.app().add_flag("--progress", o.progress,
                            "Show epoch, step, loss, throughput and ETA (redrawn in "
                            "place on a terminal)");
           f.AfterParse([&o, &timeout_s](const Terminal& terminal) {
             o.timeout = absl::Seconds(timeout_s);
             o.live = terminal.is_tty;
             o.columns = terminal.columns;
           });
           f.Run(RunWait, o);
         }},
    {.path = "cancel",
     .summary = "Stop every rank of a job and record it CANCELLED",
     .examples = "  tessctl cancel 3",
     .declare =
         [](CommandFlags& f) {
           CancelOptions& o = f.Options<CancelOptions>();
           f.Id("job", &o.job_id, "Job id");
           f.Run(RunCancel, o);
         }},
    {.path = "logs",
     .summary =
         "Print a rank's captured stdout and stderr (kept after its worker is gone)",
     .examples = "  tessctl logs 3\n  tessctl logs 3 --rank 1 -f",
     .declare =
         [](CommandFlags& f) {
           LogsOptions& o = f.Options<LogsOptions>();
           f.Id("job", &o.job_id, "Job id");
           f.app()
               .add_option("--rank", o.rank, "Rank whose log to print")
               ->capture_default_str()
               ->check(NumberAtLeast<int32_t>(0));
           f.app()
               .add_option("--attempt", o.attempt, "Attempt (default: the current one)")
               ->check(NumberAtLeast<int32_t>(0));
           f.app().add_flag("-f,--follow", o.follow,
                            "Keep printing until the rank's log ends");
           f.Run(RunLogs, o);
         }},
    {.path = "export",
     .summary =
         "Write a job's trained model as safetensors with timm, Hugging Face or "
         "torchvision names (runs tessera-export on the job's checkpoint directory)",
     .examples = "  tessctl export 12 --names timm -o pets-vit.safetensors\n"
                 "  tessctl export 12 --names torchvision --step 3000 -o "
                 "vit-b16-step3000.safetensors\n"
                 "Then in Python:\n"
                 "  m = torchvision.models.vit_b_16(num_classes=37)\n"
                 "  m.load_state_dict(safetensors.torch.load_file("
                 "'vit-b16-step3000.safetensors'))",
     .declare =
         [](CommandFlags& f) {
           ExportOptions& o = f.Options<ExportOptions>();
           f.Id("job", &o.job_id, "Job id");
           f.app()
               .add_option("--names", o.names, "timm | hf | torchvision | tessera")
               ->capture_default_str()
               ->check(CLI::IsMember({"timm", "hf", "torchvision", "tessera"}));
           f.app()
               .add_option("-o,--out", o.out, "The safetensors file to write")
               ->required();
           f.app()
               .add_option("--step", o.step,
                           "Export this step's checkpoint (default: the latest)")
               ->check(NumberAtLeast<int64_t>(1));
           f.app().add_option("--checkpoint", o.checkpoint,
                              "Read the checkpoints here instead of the spec's "
                              "trainer.checkpoint_dir (where it is mounted elsewhere)");
           f.app().add_option(
               "--exporter", o.exporter,
               "The tessera-export binary (default: beside tessctl, then $PATH)");
           f.Run(RunExport, o);
         }},
    {.path = "eval",
     .summary =
         "Submit a job of kind eval: a job's checkpoint or a safetensors file evaluated "
         "on one split (top-1, top-5, loss, per-class accuracy, confusion matrix)",
     .examples = "  tessctl eval 12\n"
                 "  tessctl eval 12 --step 3000 --data /data/pets --split val\n"
                 "  tessctl eval --from /data/models/vit.safetensors --model vit-ti16 "
                 "--data /data/pets\n"
                 "  tessctl eval --from /data/models/vit.safetensors --model vit-micro "
                 "--image-size 32 --data /data/cifar-png --split val --set "
                 "trainer.crop_fraction=1\n"
                 "  tessctl status JOB -o json | jq .eval",
     .declare =
         [](CommandFlags& f) {
           EvalOptions& o = f.Options<EvalOptions>();
           f.app()
               .add_option("job", o.job_id, "Job whose checkpoint to evaluate")
               ->check(NumberAtLeast<int64_t>(1));
           f.app()
               .add_option("--step", o.step,
                           "Its checkpoint of this step (default: latest)")
               ->check(NumberAtLeast<int64_t>(1));
           f.app().add_option("--from", o.from,
                              "Or a safetensors file (timm, Hugging Face, torchvision or "
                              "Tessera names) under the workers' data roots");
           f.app().add_option("--model", o.model, "With --from: the model preset");
           f.app()
               .add_option("--dataset", o.dataset, "With --from: the data's kind")
               ->capture_default_str();
           f.app()
               .add_option("--names", o.names,
                           "With --from: auto | timm | hf | torchvision | tessera")
               ->capture_default_str();
           f.app().add_option(
               "--image-size", o.image_size,
               "With --from: the model's input size (default: the preset's)");
           f.app().add_option(
               "--data", o.data_dir,
               "The data folder (default: the job's; required with --from)");
           f.app()
               .add_option("--split", o.split, "test | val | train (default: test)")
               ->check(CLI::IsMember({"test", "val", "train"}));
           f.app()
               .add_option("--world-size", o.world_size, "Ranks that share the split")
               ->capture_default_str()
               ->check(NumberAtLeast<int32_t>(1));
           f.app()
               .add_option("--device", o.device, "auto | cpu | cuda (default: the job's)")
               ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
           f.SpecOverrides(
               &o.overrides,
               "Set the data's preprocessing, trainer.KEY=VALUE for KEY crop_fraction, "
               "mean, std, image_size or interpolation (repeatable; default: the job's, "
               "or with --from what comes with the file, else the trainer's)");
           f.app().add_option("--name", o.name, "The eval job's name");
           f.app().add_flag(
               "--follow", o.submit.follow,
               "Then show the job's progress until it ends and exit as `wait` does");
           FollowWithProgress(f, o.submit.follow_options);
           f.Run(RunEval, o);
         }},
    {.path = "metrics",
     .summary = "Print a job's stored metrics",
     .examples =
         "  tessctl metrics 3 --name loss\n  tessctl metrics 3 -o csv > metrics.csv",
     .declare =
         [](CommandFlags& f) {
           MetricsOptions& o = f.Options<MetricsOptions>();
           f.Id("job", &o.job_id, "Job id");
           f.Format(&o.format, {"table", "json", "csv"});
           f.app().add_option("--name", o.name, "Only this metric, e.g. loss");
           f.Run(RunMetrics, o);
         }},
    // ---- sweeps ----
    // `sweep FILE` is a shorthand for `sweep submit FILE`: CLI11 tries a word as a
    // subcommand of `sweep` first, so only a file literally named like one of them
    // needs the long form.
    {.path = "sweep",
     .summary =
         "Run a scaling study: a grid of jobs (world size x batch size x scaling x "
         "shape, times repeats) and its report.\n`tessctl sweep FILE` is short for "
         "`tessctl sweep submit FILE`; the other subcommands inspect sweeps by id.",
     .examples = "  tessctl sweep examples/sweep-vit-micro-2x2.yaml --follow\n"
                 "  tessctl sweep submit examples/paper-study.yaml --set repeats=3\n"
                 "  tessctl sweep list\n"
                 "  tessctl sweep status 4\n"
                 "  tessctl sweep report 4 -o csv > report.csv\n"
                 "  tessctl sweep cancel 4",
     .declare =
         [](CommandFlags& f) {
           SweepSubmitOptions& o = f.Options<SweepSubmitOptions>();
           f.app().require_subcommand(0, 1);
           f.File(&o.spec_path,
                  "Sweep spec YAML file (shorthand for `sweep submit FILE`)", false);
           f.SpecOverrides(&o.overrides,
                           "With FILE: override a spec field, KEY=VALUE (repeatable)");
           f.app().add_flag("--follow", o.follow,
                            "With FILE: then show per-point progress until the sweep "
                            "ends");
           f.Check([&o](const CLI::App& sweep, std::ostream& err) {
             return CheckSweepUsage(o, sweep, err);
           });
           FollowOnTerminal(f, o.follow_options);
           f.Run(RunSweepSubmit, o);
         }},
    {.path = "sweep submit",
     .summary = "Validate a sweep spec locally and submit it; prints the number of "
                "points, then the sweep id last",
     .examples = "  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml\n"
                 "  tessctl sweep submit examples/sweep-vit-micro-2x2.yaml --follow\n"
                 "  SWEEP=$(tessctl sweep submit study.yaml | tail -n1)",
     .declare =
         [](CommandFlags& f) {
           SweepSubmitOptions& o = f.Options<SweepSubmitOptions>();
           f.File(&o.spec_path, "Sweep spec YAML file", true);
           f.SpecOverrides(&o.overrides,
                           "Override a spec field before validation, KEY=VALUE with KEY "
                           "a dotted path, e.g. base.trainer.epochs=1 (repeatable)");
           f.app().add_flag("--follow", o.follow,
                            "Then show per-point progress until the sweep ends");
           FollowOnTerminal(f, o.follow_options);
           f.Run(RunSweepSubmit, o);
         }},
    {.path = "sweep follow",
     .summary = "Show a sweep's per-point progress until it ends; exit 0 if it SUCCEEDED",
     .examples = "  tessctl sweep follow 4",
     .declare =
         [](CommandFlags& f) {
           SweepFollowOptions& o = f.Options<SweepFollowOptions>();
           f.Id("sweep", &o.sweep_id, "Sweep id");
           FollowOnTerminal(f, o);
           f.Run(RunSweepFollow, o);
         }},
    {.path = "sweep list",
     .summary = "List sweeps, newest first",
     .examples = "  tessctl sweep list\n  tessctl sweep list -o json",
     .declare =
         [](CommandFlags& f) {
           ListOptions& o = f.Options<ListOptions>();
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunSweepList, o);
         }},
    {.path = "sweep status",
     .summary = "Show a sweep's state and its points (coordinates, job, state)",
     .examples = "  tessctl sweep status 4\n  tessctl sweep status 4 -o json | jq .state",
     .declare =
         [](CommandFlags& f) {
           SweepIdOptions& o = f.Options<SweepIdOptions>();
           f.Id("sweep", &o.sweep_id, "Sweep id");
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunSweepStatus, o);
         }},
    {.path = "sweep report",
     .summary = "Per grid point: runs, epoch time mean ± std, speedup, efficiency, "
                "comm share and final accuracy (computed by the coordinator)",
     .examples = "  tessctl sweep report 4\n  tessctl sweep report 4 -o csv > report.csv",
     .declare =
         [](CommandFlags& f) {
           SweepIdOptions& o = f.Options<SweepIdOptions>();
           f.Id("sweep", &o.sweep_id, "Sweep id");
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunSweepReport, o);
         }},
    {.path = "sweep cancel",
     .summary = "Cancel a sweep's running points and submit no more",
     .examples = "  tessctl sweep cancel 4",
     .declare =
         [](CommandFlags& f) {
           SweepIdOptions& o = f.Options<SweepIdOptions>();
           f.Id("sweep", &o.sweep_id, "Sweep id");
           f.Run(RunSweepCancel, o);
         }},
    // ---- searches ----
    // `search FILE` is short for `search submit FILE`, as for sweeps.
    {.path = "search",
     .summary =
         "Run a hyperparameter search: trials of a base job with other values of "
         "trainer keys (grid, random or ASHA), ranked by a metric (docs/search.md).\n"
         "`tessctl search FILE` is short for `tessctl search submit FILE`; the other "
         "subcommands inspect searches by id.",
     .examples = "  tessctl search examples/search-vit-micro-asha.yaml --follow\n"
                 "  tessctl search submit search.yaml --set search.max_trials=9\n"
                 "  tessctl search follow 2\n"
                 "  tessctl search list\n"
                 "  tessctl search status 2\n"
                 "  tessctl search report 2 -o csv > trials.csv\n"
                 "  tessctl search best 2 --export best.safetensors\n"
                 "  tessctl search cancel 2",
     .declare =
         [](CommandFlags& f) {
           SearchSubmitOptions& o = f.Options<SearchSubmitOptions>();
           f.app().require_subcommand(0, 1);
           f.File(&o.spec_path,
                  "Search spec YAML file (shorthand for `search submit FILE`)", false);
           f.SpecOverrides(&o.overrides,
                           "With FILE: override a spec field, KEY=VALUE (repeatable)");
           f.app().add_flag("--follow", o.follow,
                            "With FILE: then show per-trial progress until the search "
                            "ends");
           f.Check([&o](const CLI::App& search, std::ostream& err) {
             return CheckSearchUsage(o, search, err);
           });
           FollowOnTerminal(f, o.follow_options);
           f.Run(RunSearchSubmit, o);
         }},
    {.path = "search submit",
     .summary = "Validate a search spec locally and submit it; prints the number of "
                "trials, then the search id last",
     .examples = "  tessctl search submit search.yaml\n"
                 "  tessctl search submit search.yaml --follow\n"
                 "  tessctl search submit search.yaml --set search.method=random\n"
                 "  SEARCH=$(tessctl search submit search.yaml | tail -n1)",
     .declare =
         [](CommandFlags& f) {
           SearchSubmitOptions& o = f.Options<SearchSubmitOptions>();
           f.File(&o.spec_path, "Search spec YAML file", true);
           f.SpecOverrides(
               &o.overrides,
               "Override a spec field before validation, KEY=VALUE with KEY "
               "a dotted path, e.g. base.trainer.batch_size=128 (repeatable)");
           f.app().add_flag("--follow", o.follow,
                            "Then show per-trial progress until the search ends");
           FollowOnTerminal(f, o.follow_options);
           f.Run(RunSearchSubmit, o);
         }},
    {.path = "search follow",
     .summary = "Show a search's trials as they start, are promoted and end, with "
                "one running trial's progress, until it ends; exit 0 if it SUCCEEDED",
     .examples = "  tessctl search follow 2\n"
                 "  tessctl search follow 2 > search-2.log   # a status line every 10s",
     .declare =
         [](CommandFlags& f) {
           SearchFollowOptions& o = f.Options<SearchFollowOptions>();
           f.Id("search", &o.search_id, "Search id");
           FollowOnTerminal(f, o);
           f.Run(RunSearchFollow, o);
         }},
    {.path = "search list",
     .summary = "List searches, newest first",
     .examples = "  tessctl search list\n  tessctl search list -o json",
     .declare =
         [](CommandFlags& f) {
           ListOptions& o = f.Options<ListOptions>();
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunSearchList, o);
         }},
    {.path = "search status",
     .summary = "Show a search's state, method, metric, trial counts and best trial",
     .examples =
         "  tessctl search status 2\n  tessctl search status 2 -o json | jq .best_trial",
     .declare =
         [](CommandFlags& f) {
           SearchIdOptions& o = f.Options<SearchIdOptions>();
           f.Id("search", &o.search_id, "Search id");
           f.Format(&o.format, {"table", "json"});
           f.Run(RunSearchStatus, o);
         }},
    {.path = "search report",
     .summary = "Per trial: its values, status, rung reached, steps and best metric; "
                "the search's best trial marked *",
     .examples = "  tessctl search report 2\n"
                 "  tessctl search report 2 -o csv > trials.csv\n"
                 "  tessctl search report 2 -o json | jq '.trials[] | select(.best)'",
     .declare =
         [](CommandFlags& f) {
           SearchIdOptions& o = f.Options<SearchIdOptions>();
           f.Id("search", &o.search_id, "Search id");
           f.Format(&o.format, {"table", "json", "csv"});
           f.Run(RunSearchReport, o);
         }},
    {.path = "search cancel",
     .summary = "Cancel a search's running trials and start no more",
     .examples = "  tessctl search cancel 2",
     .declare =
         [](CommandFlags& f) {
           SearchIdOptions& o = f.Options<SearchIdOptions>();
           f.Id("search", &o.search_id, "Search id");
           f.Run(RunSearchCancel, o);
         }},
    {.path = "search best",
     .summary = "Show a search's best trial; with --export, write its weights as "
                "safetensors (as `tessctl export` does for the trial's latest job)",
     .examples = "  tessctl search best 2\n"
                 "  tessctl search best 2 --export best.safetensors --names timm\n"
                 "  tessctl search best 2 -o json | jq .parameters",
     .declare =
         [](CommandFlags& f) {
           SearchBestOptions& o = f.Options<SearchBestOptions>();
           f.Id("search", &o.search_id, "Search id");
           f.Format(&o.format, {"table", "json"});
           f.app().add_option("--export", o.export_options.out,
                              "Write the best trial's weights to this safetensors file");
           f.app()
               .add_option("--names", o.export_options.names,
                           "With --export: timm | hf | torchvision | tessera")
               ->capture_default_str()
               ->check(CLI::IsMember({"timm", "hf", "torchvision", "tessera"}));
           f.app().add_option("--checkpoint", o.export_options.checkpoint,
                              "With --export: read the trial's checkpoints here instead "
                              "of its job's trainer.checkpoint_dir");
           f.app().add_option(
               "--exporter", o.export_options.exporter,
               "With --export: the tessera-export binary (default: beside tessctl, "
               "then $PATH)");
           f.Run(RunSearchBest, o);
         }},
    // ---- completion ----
    {.path = "completion",
     .summary = "Print a shell completion script (bash)",
     .examples = "  tessctl completion bash\n  source <(tessctl completion bash)\n"
                 "  tessctl completion bash > /etc/bash_completion.d/tessctl",
     .declare =
         [](CommandFlags& f) {
           std::string& shell = f.Options<std::string>();
           f.app()
               .add_option("shell", shell, "Shell: bash")
               ->required()
               ->check(CLI::IsMember({"bash"}));
           f.PositionalWords({"bash"});
           f.RunLocally([](CommandEnv& env) {
             env.out << BashCompletionScript(env.root, env.hints);
             return kExitOk;
           });
         }},
};

}  // namespace

std::span<const CommandRow> TessctlCommands() { return kCommands; }

}  // namespace tessera::cli
