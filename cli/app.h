// The tessctl command line: parses arguments with CLI11 and runs the chosen
// subcommand (commands.h) against the coordinator named by --coordinator, which
// defaults to $TESSERA_COORDINATOR and then 127.0.0.1:50051.
//
// RunTessctl is main() minus the process: tests pass their own streams and a
// factory that returns a client over an in-process channel.
//
// Thread-safety: RunTessctl shares no state between calls; it reads the
// TESSERA_COORDINATOR environment variable.
#ifndef TESSERA_CLI_APP_H_
#define TESSERA_CLI_APP_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/client.h"

namespace tessera::cli {

// Builds the client for the coordinator address the user chose.
using ClientFactory =
    std::function<std::unique_ptr<CoordinatorClient>(const std::string& address)>;

// Default coordinator address when neither --coordinator nor the environment
// names one.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";
inline constexpr char kCoordinatorEnv[] = "TESSERA_COORDINATOR";

// Parses `args` (without the program name), runs the subcommand and returns the
// exit code (see commands.h); 2 for command-line errors, 0 for --help.
int RunTessctl(const std::vector<std::string>& args, const ClientFactory& make_client,
               std::ostream& out, std::ostream& err);

}  // namespace tessera::cli

#endif  // TESSERA_CLI_APP_H_
