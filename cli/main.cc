// tessctl: the command-line client of the Tessera coordinator. See cli/app.h.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/client.h"

namespace {

tessera::cli::Terminal StdoutTerminal() {
  tessera::cli::Terminal terminal;
  terminal.is_tty = isatty(STDOUT_FILENO) == 1;
  if (!terminal.is_tty) return terminal;
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    terminal.columns = size.ws_col;
  } else if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    terminal.columns = std::atoi(columns);
  }
  return terminal;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tessera::cli::RunTessctl(
      args,
      [](const tessera::cli::ConnectionOptions& connection) {
        return tessera::cli::MakeCoordinatorClient(connection);
      },
      std::cout, std::cerr, StdoutTerminal());
}
