// SpawnChild: fork, set the child up, execve. The one copy of the steps that
// every process Tessera starts goes through (the worker's ranks, the
// coordinator's Slurm commands).
//
// The child, in this order: starts a process group of its own; joins a
// cgroup (while still root); limits its data size (RLIMIT_DATA, soft and
// hard, so the program cannot raise it); switches to an account (setgroups, setgid,
// setuid, then checks that it cannot get root back); asks for
// PR_SET_PDEATHSIG (after the switch, which clears it); unblocks every signal
// and resets SIGTERM, SIGINT, SIGHUP, SIGPIPE and SIGCHLD to their defaults;
// puts the given descriptors on stdin, stdout and stderr; closes every other
// descriptor above stderr, O_CLOEXEC or not; changes directory (as the
// account); sets its umask; and execs with exactly the environment given.
// A step that fails is reported to the parent through a pipe (the step and
// its errno) and the child exits with 127.
//
// Everything the child uses is prepared by the caller before the call: after
// fork only async-signal-safe calls are allowed, so the child neither
// allocates nor looks anything up (UnixAccount is looked up beforehand).
//
// Thread-safety: SpawnChild may be called from several threads at once. The
// descriptors a caller passes should be O_CLOEXEC, so that a child spawned by
// another thread at the same moment does not inherit them.
#ifndef TESSERA_COMMON_PROCESS_CHILD_SETUP_H_
#define TESSERA_COMMON_PROCESS_CHILD_SETUP_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "common/process/unix_account.h"

namespace tessera {

// The steps between fork and exec that can fail.
enum class ChildStep : int {
  kJoinCgroup = 1,
  kSetGroups,
  kSetGid,
  kSetUid,
  kKeptRoot,  // setuid(0) succeeded after the switch: root was not dropped
  kChdir,
  kExec,
  kLimitData,  // setrlimit(RLIMIT_DATA)
};

// "setgroups", "dropping root", "exec", ... for messages.
const char* ChildStepName(ChildStep step);

struct ChildSetup {
  // argv[0] is the path execve runs (no PATH search); both arrays end with
  // nullptr. envp is the whole environment: nothing of the parent's passes.
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  // Put on descriptors 0, 1 and 2; -1 leaves that one as the parent has it.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // An open cgroup.procs of the cgroup v2 group to join; -1: none.
  int cgroup_procs_fd = -1;
  // RLIMIT_DATA for the program in bytes (heap, private writable mappings,
  // thread stacks: what an allocation fails against); 0: the caller's.
  int64_t data_limit_bytes = 0;
  // Unset: the child keeps the caller's ids. Set: it switches to this account
  // (needs root). Not owned; read by the child.
  const UnixAccount* run_as = nullptr;
  // The directory the program starts in, entered as `run_as`; null: the
  // parent's.
  const char* working_dir = nullptr;
  // PR_SET_PDEATHSIG(SIGKILL): the child dies with the thread that forked it.
  bool die_with_parent = false;
  mode_t umask = 077;
};

struct SpawnedChild {
  pid_t pid = -1;
  // Set when a step before exec failed; the child has then exited (127) and
  // been reaped, and `error` is that step's errno.
  std::optional<ChildStep> failed_step;
  int error = 0;
};

// Forks a child that follows `setup` and execs. Returns once the exec has
// happened or a step before it failed (failed_step). Not OK (Internal) only
// when the pipe or the fork itself fails. The parent also puts the child in
// its own process group, so that a signal sent to the group right away
// reaches it.
absl::StatusOr<SpawnedChild> SpawnChild(const ChildSetup& setup);

// Closes every descriptor from 3 up except `keep` (-1: none). Async-signal-
// safe: close_range(2) where the kernel has it (5.9+), else the entries of
// /proc/self/fd read with getdents64, else every number below the descriptor
// limit (at most 2^20).
void CloseDescriptorsFrom3(int keep);

}  // namespace tessera

#endif  // TESSERA_COMMON_PROCESS_CHILD_SETUP_H_
