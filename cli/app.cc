#include "cli/app.h"

#include <CLI/CLI.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/command_table.h"
#include "cli/exit_codes.h"

namespace tessera::cli {

namespace {

// Program description, footer and the options every command takes.
void DeclareRoot(CLI::App& app, ConnectionOptions& connection) {
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();
  app.footer(
      HelpFooter("  tessctl submit examples/fmnist-2rank.yaml --follow\n"
                 "  tessctl --coordinator 10.0.0.5:50051 jobs --state running -o json\n"
                 "  tessctl sweep examples/sweep-vit-micro-2x2.yaml\n"
                 "  source <(tessctl completion bash)"));
  app.add_option("--coordinator", connection.address,
                 absl::StrCat("Coordinator gRPC address HOST:PORT (default: $",
                              kCoordinatorEnv, ", then ", kDefaultCoordinator, ")"))
      ->envname(kCoordinatorEnv);
  // No default shown: the token must never appear in help or messages.
  app.add_option(
         "--token", connection.token,
         absl::StrCat("Bearer token sent with every request (default: $", kTokenEnv, ")"))
      ->envname(kTokenEnv);
  app.add_option("--tls-ca", connection.tls_ca_file,
                 absl::StrCat("PEM roots that verify the coordinator's TLS certificate "
                              "(default: $",
                              kTlsCaEnv, ")"))
      ->envname(kTlsCaEnv);
  app.add_option("--tls-pin", connection.tls_pin,
                 absl::StrCat("SHA-256 of the coordinator's self-signed certificate "
                              "(default: $",
                              kTlsPinEnv, ", then the pin the token carries)"))
      ->envname(kTlsPinEnv);
}

}  // namespace

int RunCommandLine(std::span<const CommandRow> commands,
                   const std::vector<std::string>& args, const ClientFactory& make_client,
                   std::ostream& out, std::ostream& err, const Terminal& terminal) {
  CLI::App app("tessctl: submit and inspect Tessera training jobs and sweeps.",
               "tessctl");
  ConnectionOptions connection{.address = kDefaultCoordinator};
  DeclareRoot(app, connection);
  app.failure_message(UsageFailureMessage);
  CommandTree tree(app, commands);

  // CLI11 consumes arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (!tree.CheckUsage(err)) return kExitUsage;
  const bool needs_coordinator = tree.ChosenNeedsCoordinator();
  if (needs_coordinator && !connection.token.empty()) {
    if (absl::Status valid = ValidateToken(connection.token); !valid.ok()) {
      err << "tessctl: --token/$" << kTokenEnv << ": " << valid.message() << "\n";
      return kExitUsage;
    }
  }
  tree.Finish(terminal);
  std::unique_ptr<CoordinatorClient> client;
  if (needs_coordinator) client = make_client(connection);
  return tree.Run(client.get(), out, err);
}

int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err, const Terminal& terminal) {
  return RunCommandLine(TessctlCommands(), args, make_client, out, err, terminal);
}

}  // namespace tessera::cli
