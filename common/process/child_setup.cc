#include "common/process/child_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera {

namespace {

// What the child writes to the error pipe when a step fails.
struct ChildError {
  int step = 0;
  int err = 0;
};

// Writes the failed step and errno to the pipe, then exits. Async-signal-safe.
[[noreturn]] void ChildFail(int fd, ChildStep step) {
  ChildError e{static_cast<int>(step), errno};
  ssize_t ignored = write(fd, &e, sizeof(e));
  (void)ignored;
  _exit(127);
}

// dup2 `from` onto `to`; when they are the same descriptor, dup2 would keep
// its O_CLOEXEC and exec would close it, so the flag is cleared instead.
void PutOn(int from, int to) {
  if (from < 0) return;
  if (from == to) {
    fcntl(to, F_SETFD, 0);
  } else {
    dup2(from, to);
  }
}

// The child's side: async-signal-safe calls only.
[[noreturn]] void RunChild(const ChildSetup& setup, pid_t parent, int err_fd) {
  setpgid(0, 0);
  // Join the cgroup before exec (and while still root), so that everything
  // the program starts is inside it from the first instruction.
  if (setup.cgroup_procs_fd >= 0 && write(setup.cgroup_procs_fd, "0", 1) != 1) {
    ChildFail(err_fd, ChildStep::kJoinCgroup);
  }
  // Soft and hard alike, before the switch: the program cannot raise it.
  if (setup.data_limit_bytes > 0) {
    const auto bytes = static_cast<rlim_t>(setup.data_limit_bytes);
    const struct rlimit limit = {bytes, bytes};
    if (setrlimit(RLIMIT_DATA, &limit) != 0) ChildFail(err_fd, ChildStep::kLimitData);
  }
  if (const UnixAccount* account = setup.run_as; account != nullptr) {
    // Groups first: once the uid is not root, they can no longer change.
    if (setgroups(account->groups.size(), account->groups.data()) != 0) {
      ChildFail(err_fd, ChildStep::kSetGroups);
    }
    if (setgid(account->gid) != 0) ChildFail(err_fd, ChildStep::kSetGid);
    if (setuid(account->uid) != 0) ChildFail(err_fd, ChildStep::kSetUid);
    // setuid from root drops the saved uid too; make sure of it.
    if (account->uid != 0 && setuid(0) == 0) {
      errno = EPERM;
      ChildFail(err_fd, ChildStep::kKeptRoot);
    }
  }
  if (setup.die_with_parent) {
    // Asked for after the credential change, which clears it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent is already gone
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) signal(s, SIG_DFL);
  PutOn(setup.stdin_fd, STDIN_FILENO);
  PutOn(setup.stdout_fd, STDOUT_FILENO);
  PutOn(setup.stderr_fd, STDERR_FILENO);
  // Nothing of the parent's reaches the program but stdin, stdout and
  // stderr: no descriptor it holds (sockets, pipes, files), whether
  // O_CLOEXEC or not. The error pipe is O_CLOEXEC and closes itself at exec.
  CloseDescriptorsFrom3(err_fd);
  if (setup.working_dir != nullptr && chdir(setup.working_dir) != 0) {
    ChildFail(err_fd, ChildStep::kChdir);
  }
  // Files the program creates are its owner's alone unless it says otherwise.
  umask(setup.umask);
  execve(setup.argv[0], setup.argv, setup.envp);
  ChildFail(err_fd, ChildStep::kExec);
}

}  // namespace

const char* ChildStepName(ChildStep step) {
  switch (step) {
    case ChildStep::kJoinCgroup:
      return "joining the cgroup";
    case ChildStep::kSetGroups:
      return "setgroups";
    case ChildStep::kSetGid:
      return "setgid";
    case ChildStep::kSetUid:
      return "setuid";
    case ChildStep::kKeptRoot:
      return "dropping root";
    case ChildStep::kChdir:
      return "chdir";
    case ChildStep::kLimitData:
      return "setting RLIMIT_DATA";
    case ChildStep::kExec:
      break;
  }
  return "exec";
}

void CloseDescriptorsFrom3(int keep) {
#ifdef SYS_close_range
  bool closed_all = true;
  if (keep > 3) {
    closed_all = syscall(SYS_close_range, 3u, static_cast<unsigned>(keep) - 1, 0u) == 0;
  }
  const unsigned from = keep >= 3 ? static_cast<unsigned>(keep) + 1 : 3u;
  if (closed_all && syscall(SYS_close_range, from, ~0u, 0u) == 0) return;
#endif
  const int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    // Closing while listing may shift the listing: list again until a pass
    // closes nothing.
    for (bool closed = true; closed;) {
      closed = false;
      alignas(8) char buf[4096];
      if (lseek(dir, 0, SEEK_SET) != 0) break;
      for (long n; (n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0;) {
        for (long off = 0; off < n;) {
          struct Entry {
            uint64_t ino;
            int64_t off;
            unsigned short reclen;
            unsigned char type;
            char name[1];
          };
          const auto* e = reinterpret_cast<const Entry*>(buf + off);
          off += e->reclen;
          int fd = 0;
          bool number = e->name[0] != '\0';
          for (const char* c = e->name; *c != '\0' && number; ++c) {
            number = *c >= '0' && *c <= '9';
            fd = fd * 10 + (*c - '0');
          }
          if (number && fd >= 3 && fd != keep && fd != dir) {
            close(fd);
            closed = true;
          }
        }
      }
    }
    close(dir);
    return;
  }
  rlimit limit{};
  const rlim_t top =
      getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
          ? std::min<rlim_t>(limit.rlim_cur, 1 << 20)
          : 1 << 16;
  for (int fd = 3; fd < static_cast<int>(top); ++fd) {
    if (fd != keep) close(fd);
  }
}

absl::StatusOr<SpawnedChild> SpawnChild(const ChildSetup& setup) {
  if (setup.argv == nullptr || setup.argv[0] == nullptr || setup.envp == nullptr) {
    return absl::InvalidArgumentError("SpawnChild: no argv or environment");
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) RunChild(setup, parent, err_pipe[1]);
  const int fork_errno = errno;
  close(err_pipe[1]);
  if (pid < 0) {
    close(err_pipe[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);  // also in the parent, so signals sent right away reach the group
  SpawnedChild spawned;
  spawned.pid = pid;
  // A failure before exec arrives on the error pipe; exec closes it.
  ChildError child;
  ssize_t n;
  do {
    n = read(err_pipe[0], &child, sizeof(child));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(child))) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    spawned.failed_step = static_cast<ChildStep>(child.step);
    spawned.error = child.err;
  }
  return spawned;
}

}  // namespace tessera
