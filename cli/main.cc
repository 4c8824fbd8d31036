// tessctl: the command-line client of the Tessera coordinator. See cli/app.h.
#include <iostream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/client.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tessera::cli::RunTessctl(
      args,
      [](const std::string& address) {
        return tessera::cli::MakeCoordinatorClient(address);
      },
      std::cout, std::cerr);
}
