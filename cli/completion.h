// Shell completion for tessctl, generated from the CLI11 command tree itself so
// that it cannot drift from the real subcommands and options:
//
//   source <(tessctl completion bash)
//
// The script completes subcommands at every level, option names (a command's own
// and those it inherits, such as --coordinator), the values of options with a
// fixed set of choices (-o, --state), and file names where a command takes a
// spec file.
//
// Thread-safety: pure function of its arguments.
#ifndef TESSERA_CLI_COMPLETION_H_
#define TESSERA_CLI_COMPLETION_H_

#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::cli {

// What the command tree itself does not say. A command is named by its path
// below the program, words joined by spaces: "" (the program), "jobs",
// "sweep report".
struct CompletionHints {
  // (path, option name as typed, e.g. "-o" or "--output") -> its choices.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> choices;
  // path -> words its positional argument takes (e.g. "completion" -> bash).
  std::map<std::string, std::vector<std::string>> positional_words;
  // Paths whose positional argument is a file.
  std::set<std::string> file_commands;
};

// The command path of `app` ("" for the root, "sweep report" for a nested one).
std::string CommandPath(const CLI::App& app);

// A bash script defining _tessctl and registering it with `complete`.
std::string BashCompletionScript(const CLI::App& root, const CompletionHints& hints,
                                 const std::string& program = "tessctl");

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMPLETION_H_
