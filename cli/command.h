// A tessctl command is one CommandRow: where it sits in the command tree, its
// one-line summary, its examples, and a function that declares its flags and
// says how it runs. The rows live in one table (command_table.h); CommandTree
// turns them into CLI11's command tree, so `--help`, shell completion and
// dispatch all read the same rows. Adding a command is one row plus its run
// function:
//
//   {.path = "cancel",
//    .summary = "Stop every rank of a job and record it CANCELLED",
//    .examples = "  tessctl cancel 3",
//    .declare = [](CommandFlags& f) {
//      CancelOptions& o = f.Options<CancelOptions>();
//      f.Id("job", &o.job_id, "Job id");
//      f.Run(RunCancel, o);
//    }},
//
// Thread-safety: a CommandTree and its CommandFlags serve one tessctl
// invocation on one thread.
#ifndef TESSERA_CLI_COMMAND_H_
#define TESSERA_CLI_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client.h"
#include "cli/completion.h"
#include "cli/output.h"

namespace tessera::cli {

// What tessctl knows about where `out` goes.
struct Terminal {
  // `out` is a terminal: follow commands redraw one progress line in place.
  bool is_tty = false;
  int columns = 0;  // its width; 0: unknown
};

// What a command's run function gets.
struct CommandEnv {
  // The coordinator; null for a command declared with RunLocally.
  CoordinatorClient* client = nullptr;
  std::ostream& out;
  std::ostream& err;
  // The whole command tree, for commands that describe it (completion).
  const CLI::App& root;
  const CompletionHints& hints;
};

class CommandFlags;

// One command. Rows are constant data: the strings are literals and `declare`
// a captureless lambda, so a table of them needs no construction at start-up.
struct CommandRow {
  // Its words below `tessctl`, e.g. "jobs" or "sweep report". A row comes after
  // the row of the group it belongs to ("sweep").
  std::string_view path;
  // One line for the parent's list of commands and the top of its --help.
  std::string_view summary;
  // Its --help's "Examples:" lines, each "  tessctl PATH ..." (at least one).
  std::string_view examples;
  // Declares the command's flags and, with CommandFlags::Run or RunLocally,
  // what runs it. A command without a run function only groups subcommands
  // and needs one of them.
  void (*declare)(CommandFlags& flags) = nullptr;
};

// Declares one command's flags on its CLI11 node (and what completion should
// know of them), owns the storage they are parsed into, and records the hooks
// that run after parsing.
class CommandFlags {
 public:
  CommandFlags(const CommandFlags&) = delete;
  CommandFlags& operator=(const CommandFlags&) = delete;

  // The command's CLI11 node, for add_option / add_flag.
  CLI::App& app() { return *app_; }

  // Storage that lives as long as the tree (CLI11 keeps pointers into it),
  // starting as `initial`.
  template <typename T>
  T& Options(T initial = T{}) {
    auto owned = std::make_shared<T>(std::move(initial));
    T& ref = *owned;
    storage_.push_back(std::move(owned));
    return ref;
  }

  // -o/--output, one spelling for every command, limited to `names` (of
  // table, json, csv); CLI11 rejects others. Default: table.
  void Format(OutputFormat* format, const std::vector<std::string>& names);
  // A required positive id positional, e.g. "job".
  void Id(const std::string& name, int64_t* id, const std::string& description);
  // --set KEY=VALUE, repeatable: overrides of a spec's fields, in the order
  // given (common/job_spec.h's ApplySpecOverrides applies them).
  void SpecOverrides(std::vector<std::string>* overrides, const std::string& description);
  // The positional "file" (a path that completion completes).
  void File(std::string* path, const std::string& description, bool required);
  // The values completion offers after each of `option_names`.
  void Choices(const std::vector<std::string>& option_names,
               const std::vector<std::string>& choices);
  // The words completion offers for the positional argument.
  void PositionalWords(std::vector<std::string> words);

  // After parsing, before the command runs: fills what comes from the
  // terminal or from the parsed spelling of a flag.
  void AfterParse(std::function<void(const Terminal&)> hook);
  // After parsing: a usage error CLI11 cannot express. `check` gets the
  // command's parsed node, prints the error and returns false. Every command
  // on the parsed path is checked, a group before its subcommand.
  void Check(std::function<bool(const CLI::App& parsed, std::ostream& err)> check);

  // The command runs `run(options, client, out, err)` against the coordinator.
  template <typename Opts>
  void Run(int (*run)(const Opts&, CoordinatorClient&, std::ostream&, std::ostream&),
           const Opts& options) {
    SetRun(true, [run, &options](CommandEnv& env) {
      return run(options, *env.client, env.out, env.err);
    });
  }
  // The command runs without a coordinator (no client is built).
  void RunLocally(std::function<int(CommandEnv&)> run) { SetRun(false, std::move(run)); }

 private:
  friend class CommandTree;
  CommandFlags(CLI::App* app, CompletionHints& hints) : app_(app), hints_(hints) {}
  void SetRun(bool needs_coordinator, std::function<int(CommandEnv&)> run);

  CLI::App* const app_;     // Not owned.
  CompletionHints& hints_;  // Not owned; the tree's.
  std::vector<std::shared_ptr<void>> storage_;
  std::vector<std::function<void(const Terminal&)>> after_parse_;
  std::vector<std::function<bool(const CLI::App&, std::ostream&)>> checks_;
  std::function<int(CommandEnv&)> run_;
  bool needs_coordinator_ = false;
};

// CLI11's command tree built from a table of rows, below a root whose global
// options the caller declares. After CLI11 has parsed the arguments it finds
// the command they chose and runs it. CLI11 keeps the addresses of the flags'
// storage, so a tree is neither copied nor moved.
class CommandTree {
 public:
  CommandTree(CLI::App& root, std::span<const CommandRow> rows);
  CommandTree(const CommandTree&) = delete;
  CommandTree& operator=(const CommandTree&) = delete;

  // The parsed command talks to the coordinator (is not RunLocally).
  bool ChosenNeedsCoordinator() const;
  // Runs the checks of the parsed commands; false after printing an error.
  bool CheckUsage(std::ostream& err) const;
  // Runs the parsed commands' AfterParse hooks.
  void Finish(const Terminal& terminal);
  // Runs the parsed command and returns its exit code (exit_codes.h).
  // `client` may be null when !ChosenNeedsCoordinator().
  int Run(CoordinatorClient* client, std::ostream& out, std::ostream& err);

  const CompletionHints& hints() const { return hints_; }

 private:
  // The parsed commands from the top-level one down to the one chosen.
  std::vector<CommandFlags*> ParsedPath() const;

  CLI::App& root_;
  CompletionHints hints_;
  std::map<const CLI::App*, std::unique_ptr<CommandFlags>> commands_;
};

// The "Examples:" and "Exit codes:" footer of every --help.
std::string HelpFooter(std::string_view examples);

// tessctl's message for a command line CLI11 refuses (CLI::App::failure_message):
// the error with the command it belongs to, and where that command's help is:
//   tessctl eval: job: expected a whole number >= 1, got "x"
//   Run `tessctl eval --help` for usage.
std::string UsageFailureMessage(const CLI::App* root, const CLI::Error& error);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMMAND_H_
