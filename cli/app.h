// The tessctl command line: parses arguments with CLI11 and runs the chosen
// command (command_table.h lists them; commands.h, sweep_commands.h, ... run
// them) against the coordinator named by --coordinator, which defaults to
// $TESSERA_COORDINATOR and then 127.0.0.1:50051. --token (default
// $TESSERA_TOKEN) is sent with every call; it is never printed.
//
// RunTessctl is main() minus the process: tests pass their own streams and a
// factory that returns a client over an in-process channel.
//
// Thread-safety: RunTessctl shares no state between calls; it reads the
// TESSERA_COORDINATOR and TESSERA_TOKEN environment variables.
#ifndef TESSERA_CLI_APP_H_
#define TESSERA_CLI_APP_H_

#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/command.h"

namespace tessera::cli {

// Builds the client for the coordinator address and token the user chose.
using ClientFactory = std::function<std::unique_ptr<CoordinatorClient>(
    const ConnectionOptions& connection)>;

// Default coordinator address when neither --coordinator nor the environment
// names one.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";
inline constexpr char kCoordinatorEnv[] = "TESSERA_COORDINATOR";
inline constexpr char kTokenEnv[] = "TESSERA_TOKEN";

// Parses `args` (without the program name), runs the command and returns the
// exit code (exit_codes.h); 2 for command-line errors, 0 for --help. The client
// is built only for a command that talks to the coordinator.
int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err, const Terminal& terminal = {});

// RunTessctl with `commands` in place of tessctl's own table (tests).
int RunCommandLine(std::span<const CommandRow> commands,
                   const std::vector<std::string>& args, const ClientFactory& make_client,
                   std::ostream& out, std::ostream& err, const Terminal& terminal = {});

}  // namespace tessera::cli

#endif  // TESSERA_CLI_APP_H_
