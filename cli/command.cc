#include "cli/command.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/exit_codes.h"
#include "common/flag_checks.h"

namespace tessera::cli {

namespace {

constexpr char kExitCodes[] = R"(Exit codes:
  0    success (wait, --follow: the job, sweep or search SUCCEEDED)
  1    the job, sweep or search FAILED or was CANCELLED, or another error
  2    usage error: bad arguments or an invalid job, sweep or search spec
  3    no such job, sweep or search
  4    coordinator unreachable
  124  wait --timeout ran out)";

OutputFormat ToFormat(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "json") return OutputFormat::kJson;
  if (lower == "csv") return OutputFormat::kCsv;
  return OutputFormat::kTable;
}

// "sweep report" -> ("sweep", "report"); "jobs" -> ("", "jobs").
std::pair<std::string, std::string> SplitPath(std::string_view path) {
  const size_t space = path.rfind(' ');
  if (space == std::string_view::npos) return {"", std::string(path)};
  return {std::string(path.substr(0, space)), std::string(path.substr(space + 1))};
}

}  // namespace

std::string HelpFooter(std::string_view examples) {
  std::string footer = "Examples:\n";
  footer.append(examples).append("\n\n").append(kExitCodes);
  return footer;
}

std::string UsageFailureMessage(const CLI::App* root, const CLI::Error& error) {
  // The command the arguments reached: the parsed subcommands, top down.
  std::string command = root->get_name();
  for (const CLI::App* app = root; !app->get_subcommands().empty();) {
    app = app->get_subcommands().front();
    absl::StrAppend(&command, " ", app->get_name());
  }
  return absl::StrCat(command, ": ", error.what(), "\nRun `", command,
                      " --help` for usage.\n");
}

void CommandFlags::Format(OutputFormat* format, const std::vector<std::string>& names) {
  std::string& spelling = Options<std::string>("table");
  app_->add_option("-o,--output", spelling,
                   absl::StrCat("Output format: ", absl::StrJoin(names, "|")))
      ->check(CLI::IsMember(names, CLI::ignore_case))
      ->capture_default_str();
  Choices({"-o", "--output"}, names);
  AfterParse([format, &spelling](const Terminal&) { *format = ToFormat(spelling); });
}

void CommandFlags::Id(const std::string& name, int64_t* id,
                      const std::string& description) {
  app_->add_option(name, *id, description)->required()->check(NumberAtLeast<int64_t>(1));
}

void CommandFlags::SpecOverrides(std::vector<std::string>* overrides,
                                 const std::string& description) {
  app_->add_option("--set", *overrides, description)->allow_extra_args(false);
}

void CommandFlags::File(std::string* path, const std::string& description,
                        bool required) {
  CLI::Option* option = app_->add_option("file", *path, description);
  if (required) option->required();
  hints_.file_commands.insert(CommandPath(*app_));
}

void CommandFlags::Choices(const std::vector<std::string>& option_names,
                           const std::vector<std::string>& choices) {
  for (const std::string& name : option_names) {
    hints_.choices[{CommandPath(*app_), name}] = choices;
  }
}

void CommandFlags::PositionalWords(std::vector<std::string> words) {
  hints_.positional_words[CommandPath(*app_)] = std::move(words);
}

void CommandFlags::AfterParse(std::function<void(const Terminal&)> hook) {
  after_parse_.push_back(std::move(hook));
}

void CommandFlags::Check(
    std::function<bool(const CLI::App& parsed, std::ostream& err)> check) {
  checks_.push_back(std::move(check));
}

void CommandFlags::SetRun(bool needs_coordinator, std::function<int(CommandEnv&)> run) {
  needs_coordinator_ = needs_coordinator;
  run_ = std::move(run);
}

CommandTree::CommandTree(CLI::App& root, std::span<const CommandRow> rows) : root_(root) {
  std::map<std::string, CLI::App*> by_path = {{"", &root_}};
  for (const CommandRow& row : rows) {
    const auto [parent_path, name] = SplitPath(row.path);
    CLI::App* parent = by_path.at(parent_path);  // the group's row comes first
    CLI::App* app = parent->add_subcommand(name, std::string(row.summary));
    app->footer(HelpFooter(row.examples));
    by_path[std::string(row.path)] = app;
    auto flags = std::unique_ptr<CommandFlags>(new CommandFlags(app, hints_));
    if (row.declare != nullptr) row.declare(*flags);
    // A group without a run function of its own needs a subcommand.
    if (!flags->run_) app->require_subcommand(1);
    commands_[app] = std::move(flags);
  }
}

std::vector<CommandFlags*> CommandTree::ParsedPath() const {
  std::vector<CommandFlags*> path;
  for (const CLI::App* app = &root_; !app->get_subcommands().empty();) {
    app = app->get_subcommands().front();
    path.push_back(commands_.at(app).get());
  }
  return path;
}

bool CommandTree::ChosenNeedsCoordinator() const {
  const std::vector<CommandFlags*> path = ParsedPath();
  return !path.empty() && path.back()->needs_coordinator_;
}

bool CommandTree::CheckUsage(std::ostream& err) const {
  for (const CommandFlags* command : ParsedPath()) {
    for (const auto& check : command->checks_) {
      if (!check(*command->app_, err)) return false;
    }
  }
  return true;
}

void CommandTree::Finish(const Terminal& terminal) {
  for (CommandFlags* command : ParsedPath()) {
    for (const auto& hook : command->after_parse_) hook(terminal);
  }
}

int CommandTree::Run(CoordinatorClient* client, std::ostream& out, std::ostream& err) {
  const std::vector<CommandFlags*> path = ParsedPath();
  if (path.empty() || !path.back()->run_) {
    err << "tessctl: no command given; see tessctl --help\n";
    return kExitUsage;
  }
  CommandEnv env{
      .client = client, .out = out, .err = err, .root = root_, .hints = hints_};
  return path.back()->run_(env);
}

}  // namespace tessera::cli
