// Runs one of the build's binaries (tessera-train, tessera-export) as a user
// would, for the tests that check their command line, output and files.
// Header-only; thread-safe (each call its own process).
#ifndef TESSERA_TESTS_WORKER_TRAINER_RUN_BINARY_H_
#define TESSERA_TESTS_WORKER_TRAINER_RUN_BINARY_H_

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::testing {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// The path of the build's binary `name`: $TESSERA_BIN_DIR/name (ctest sets
// it), else bin/name.
inline std::string BinaryPath(const std::string& name) {
  const char* dir = std::getenv("TESSERA_BIN_DIR");
  return absl::StrCat(dir != nullptr ? dir : "bin", "/", name);
}

// Runs the binary with `args` through the shell. A run that hangs is killed
// after `limit_s` seconds (exit code 137 under `timeout -s KILL`), so a test
// fails with the output instead of waiting for ctest.
inline RunResult RunBinary(const std::string& name, const std::vector<std::string>& args,
                           int limit_s = 300) {
  const std::string command =
      absl::StrCat("timeout -s KILL ", limit_s, " ", BinaryPath(name), " ",
                   absl::StrJoin(args, " "), " 2>&1");
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_TRAINER_RUN_BINARY_H_
