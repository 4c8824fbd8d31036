// Runs Prometheus' promtool (Debian package `prometheus`, installed by
// scripts/setup.sh for the tests) over a /metrics page or a rules file.
// A test that needs it skips when it is missing, and fails instead when
// TESSERA_REQUIRE_PROMTOOL=1 (as .ci/run sets):
//
//   if (std::string why = PromtoolMissing(); !why.empty()) {
//     if (PromtoolRequired()) FAIL() << why;
//     GTEST_SKIP() << why;
//   }
#ifndef TESSERA_TESTS_TESTING_PROMTOOL_H_
#define TESSERA_TESTS_TESTING_PROMTOOL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::testing {

inline std::string PromtoolPath() {
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return {};
}

inline bool PromtoolRequired() {
  const char* v = std::getenv("TESSERA_REQUIRE_PROMTOOL");
  return v != nullptr && std::string(v) == "1";
}

// Why promtool cannot run here; empty when it can.
inline std::string PromtoolMissing() {
  if (!PromtoolPath().empty()) return {};
  return "promtool is missing: install Debian's prometheus package (scripts/setup.sh "
         "does)";
}

struct PromtoolResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `promtool ARGS` (a shell-quoted argument string) with `input` on stdin.
inline PromtoolResult RunPromtool(const std::string& args,
                                  const std::string& input = "") {
  PromtoolResult result;
  const std::string in_file = (std::filesystem::temp_directory_path() /
                               ("promtool-in-" + std::to_string(getpid())))
                                  .string();
  std::ofstream(in_file, std::ios::binary) << input;
  const std::string command = PromtoolPath() + " " + args + " < '" + in_file + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  std::filesystem::remove(in_file);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_PROMTOOL_H_
