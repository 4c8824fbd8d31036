// Helpers for tests that run real Tessera processes: temp dirs, the built
// binaries' location, child processes, and waiting for port files.
//
// Thread-safety: none; use from the test thread.
#ifndef TESSERA_TESTS_TESTING_TEST_UTIL_H_
#define TESSERA_TESTS_TESTING_TEST_UTIL_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Directory of the built executables ($TESSERA_BIN_DIR, set by CTest).
std::string BinDir();
// The source tree root ($TESSERA_SOURCE_DIR, set by CTest).
std::string SourceDir();

// A child process with output redirected to a file. Killed (SIGKILL, whole
// process group) on destruction if still running.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      std::vector<std::string> argv, const std::string& log_path);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // Sends `sig` to the process.
  void Signal(int sig);
  // Waits up to `timeout` for the exit; returns the raw wait status.
  std::optional<int> Wait(absl::Duration timeout);
  bool Running();
  std::string Log() const;

 private:
  ChildProcess() = default;
  pid_t pid_ = 0;
  std::optional<int> status_;
  std::string log_path_;
};

// Waits until `path` holds a port number (written by --port-file).
absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout);

// Polls `done` every 10 ms until it returns true or `timeout` passes; returns
// its last answer. For waits on another process, which sends no notification:
// every wait in a test has a deadline, and its caller says what it waited for.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout);

// A TCP port on 127.0.0.1 that was free a moment ago.
int PickUnusedPort();

std::string ReadFile(const std::string& path);

// Pids of live processes whose command line contains every one of `needles`
// as a whole argument.
std::vector<pid_t> FindProcesses(const std::vector<std::string>& needles);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_TEST_UTIL_H_
