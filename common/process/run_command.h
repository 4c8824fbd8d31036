// RunCommand: runs one program to completion and returns its exit and output.
//
// The program is started with fork + execve of an argv, never through a
// shell, with exactly the environment given, stdin fed from a string, stdout
// and stderr captured apart (each up to a limit), in a new process group, and
// every descriptor above stderr closed. A program still running at the
// deadline is killed with its whole process group (SIGKILL) and the call
// fails with DeadlineExceeded.
//
// Run as another account: with `run_as` set (needs root), the child switches
// to that account before exec (SpawnChild, child_setup.h, does every step
// between fork and exec), and checks that it cannot get root back. The
// account is looked up before the call (LookUpUnixAccount).
//
// The coordinator uses it for the Slurm commands (coordinator/slurm/); it is
// not a job launcher: a call blocks its thread until the program ends.
//
// Thread-safety: RunCommand may be called from several threads at once; each
// call owns its child and descriptors.
#ifndef TESSERA_COMMON_PROCESS_RUN_COMMAND_H_
#define TESSERA_COMMON_PROCESS_RUN_COMMAND_H_

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/unix_account.h"

namespace tessera {

struct CommandSpec {
  std::vector<std::string> argv;  // argv[0]: the program's absolute path; no shell
  std::vector<std::string> env;   // the whole environment, as "NAME=value"
  std::string stdin_data;         // written to the program's stdin, which is then closed
  std::string working_dir = "/";  // the program starts here
  // Unset: the program runs as the caller. Set: as this account (needs root).
  std::optional<UnixAccount> run_as;
  // The program and its process group are killed when it runs longer.
  absl::Duration timeout = absl::Seconds(30);
  // Bytes kept of each of stdout and stderr; the rest is read and dropped.
  size_t max_output_bytes = 1 << 20;
};

struct CommandResult {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the terminating signal, or 0
  std::string out;    // stdout, at most max_output_bytes
  std::string err;    // stderr, at most max_output_bytes
  bool succeeded() const { return signal == 0 && exit_code == 0; }
};

// Runs the command. The status is not OK only when the program could not be
// started (NotFound / PermissionDenied / Internal, naming the step that
// failed: exec, setuid, ...) or ran past the timeout (DeadlineExceeded, with
// what it wrote to stderr so far). A program that ran and failed is an OK
// status with a non-zero exit_code or signal.
absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec);

// "exit code 1" / "killed by signal 9 (Killed)", for messages.
std::string DescribeExit(const CommandResult& result);

}  // namespace tessera

#endif  // TESSERA_COMMON_PROCESS_RUN_COMMAND_H_
