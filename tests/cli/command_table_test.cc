// tessctl's command table (cli/command_table.h): every command's help has its
// summary and an example, `tessctl --help` lists the commands from the table
// in its order, and a new command needs nothing but its row.
#include "cli/command_table.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/app.h"
#include "cli/command.h"
#include "cli/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::cli {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CommandTableTest : public ::testing::Test {
 protected:
  int Cli(const std::vector<std::string>& args,
          std::span<const CommandRow> commands = TessctlCommands()) {
    out_.str("");
    err_.str("");
    return RunCommandLine(
        commands, args,
        [this](const ConnectionOptions&) {
          ++clients_;
          return std::make_unique<CoordinatorClient>(
              absl::UnavailableError("no coordinator in this test"),
              CoordinatorClient::Options{});
        },
        out_, err_);
  }

  std::ostringstream out_;
  std::ostringstream err_;
  int clients_ = 0;
};

// The names under "Subcommands:" in a --help text, in order.
std::vector<std::string> ListedCommands(const std::string& help) {
  std::vector<std::string> names;
  bool in_list = false;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (line == "Subcommands:") {
      in_list = true;
    } else if (in_list && absl::StartsWith(line, "  ") && line[2] != ' ') {
      line.remove_prefix(2);
      names.emplace_back(line.substr(0, line.find(' ')));
    } else if (in_list && line.empty()) {
      break;
    }
  }
  return names;
}

// The rows directly below `group` ("" for the top level), in table order.
std::vector<std::string> RowsBelow(const std::string& group) {
  std::vector<std::string> names;
  for (const CommandRow& row : TessctlCommands()) {
    const std::string path(row.path);
    const size_t space = path.rfind(' ');
    const std::string parent = space == std::string::npos ? "" : path.substr(0, space);
    if (parent == group) names.push_back(path.substr(space + 1));
  }
  return names;
}

TEST_F(CommandTableTest, EveryCommandsHelpHasItsSummaryAndAnExample) {
  ASSERT_FALSE(TessctlCommands().empty());
  for (const CommandRow& row : TessctlCommands()) {
    const std::string path(row.path);
    EXPECT_FALSE(row.summary.empty()) << path;
    EXPECT_THAT(std::string(row.examples), StartsWith(absl::StrCat("  tessctl ", path)))
        << path;
    std::vector<std::string> args = absl::StrSplit(path, ' ');
    args.push_back("--help");
    ASSERT_EQ(Cli(args), kExitOk) << path;
    EXPECT_THAT(out_.str(), StartsWith(std::string(row.summary))) << path;
    EXPECT_THAT(out_.str(), HasSubstr(HelpFooter(row.examples))) << path;
  }
  EXPECT_EQ(clients_, 0);  // help talks to nobody
}

TEST_F(CommandTableTest, HelpListsTheCommandsOfTheTableInItsOrder) {
  ASSERT_EQ(Cli({"--help"}), kExitOk);
  EXPECT_THAT(ListedCommands(out_.str()), ElementsAreArray(RowsBelow("")));
  for (const CommandRow& row : TessctlCommands()) {
    const std::vector<std::string> below = RowsBelow(std::string(row.path));
    if (below.empty()) continue;
    std::vector<std::string> args = absl::StrSplit(std::string(row.path), ' ');
    args.push_back("--help");
    ASSERT_EQ(Cli(args), kExitOk) << row.path;
    EXPECT_THAT(ListedCommands(out_.str()), ElementsAreArray(below)) << row.path;
  }
  // The table's own list, as docs/tessctl.md names the commands.
  EXPECT_THAT(RowsBelow(""),
              ElementsAreArray({"submit", "jobs", "status", "workers", "share", "drain",
                                "undrain", "wait", "cancel", "logs", "export", "eval",
                                "metrics", "sweep", "search", "completion"}));
}

// A command that is only its row: it shows in help, completion and dispatch.
constexpr CommandRow kExtended[] = {
    {.path = "hello",
     .summary = "Say hello without a coordinator",
     .examples = "  tessctl hello --name ada",
     .declare =
         [](CommandFlags& f) {
           std::string& name = f.Options<std::string>("world");
           f.app().add_option("--name", name, "Whom to greet");
           f.RunLocally([&name](CommandEnv& env) {
             env.out << "hello " << name << "\n";
             return kExitOk;
           });
         }},
    {.path = "things",
     .summary = "Things, by subcommand",
     .examples = "  tessctl things count"},
    {.path = "things count",
     .summary = "Count things at the coordinator",
     .examples = "  tessctl things count -o json",
     .declare =
         [](CommandFlags& f) {
           OutputFormat& format = f.Options<OutputFormat>();
           f.Format(&format, {"table", "json"});
           f.RunLocally([&format](CommandEnv& env) {
             env.out << (format == OutputFormat::kJson ? "json" : "table") << "\n";
             return kExitOk;
           });
         }},
    {.path = "completion",
     .summary = "Print a shell completion script (bash)",
     .examples = "  tessctl completion bash",
     .declare =
         [](CommandFlags& f) {
           f.RunLocally([](CommandEnv& env) {
             env.out << BashCompletionScript(env.root, env.hints);
             return kExitOk;
           });
         }},
};

TEST_F(CommandTableTest, ANewCommandIsOneRow) {
  ASSERT_EQ(Cli({"hello", "--name", "ada"}, kExtended), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "hello ada\n");
  ASSERT_EQ(Cli({"things", "count", "-o", "json"}, kExtended), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "json\n");
  EXPECT_EQ(clients_, 0);  // run locally: no client built

  // A group without a run function of its own needs a subcommand.
  EXPECT_EQ(Cli({"things"}, kExtended), kExitUsage);
  EXPECT_EQ(Cli({"things", "count", "-o", "csv"}, kExtended), kExitUsage);

  ASSERT_EQ(Cli({"--help"}, kExtended), kExitOk);
  EXPECT_THAT(ListedCommands(out_.str()),
              ElementsAreArray({"hello", "things", "completion"}));
  ASSERT_EQ(Cli({"completion"}, kExtended), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr(R"("things") echo "count")"));
  EXPECT_THAT(out_.str(), HasSubstr(R"("things count|-o") echo "table json")"));
}

TEST_F(CommandTableTest, OnlyCommandsThatTalkToTheCoordinatorBuildAClient) {
  ASSERT_EQ(Cli({"completion", "bash"}), kExitOk);
  EXPECT_EQ(clients_, 0);
  EXPECT_EQ(Cli({"jobs"}), kExitUnreachable);
  EXPECT_EQ(clients_, 1);
}

}  // namespace
}  // namespace tessera::cli
