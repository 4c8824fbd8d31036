// Every tessctl command, one CommandRow each (command.h), in the order
// `tessctl --help` lists them. The rows are the only list of commands: the
// command tree, help, shell completion and dispatch are built from them.
//
// Thread-safety: the table is constant.
#ifndef TESSERA_CLI_COMMAND_TABLE_H_
#define TESSERA_CLI_COMMAND_TABLE_H_

#include <span>

#include "cli/command.h"

namespace tessera::cli {

std::span<const CommandRow> TessctlCommands();

}  // namespace tessera::cli

#endif  // TESSERA_CLI_COMMAND_TABLE_H_
