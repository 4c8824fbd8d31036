#include "coordinator/slurm/command_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tessera {

namespace {

// What the child reports through its error pipe when a step before exec fails.
enum ChildStep : int { kChdir = 1, kSetGroups, kSetGid, kSetUid, kKeptRoot, kExec };

struct ChildError {
  int step = 0;
  int err = 0;
};

const char* StepName(int step) {
  switch (step) {
    case kChdir:
      return "chdir";
    case kSetGroups:
      return "setgroups";
    case kSetGid:
      return "setgid";
    case kSetUid:
      return "setuid";
    case kKeptRoot:
      return "dropping root";
    default:
      return "exec";
  }
}

// Writes the failed step and errno to the pipe, then exits. Async-signal-safe.
[[noreturn]] void ChildFail(int fd, ChildStep step) {
  ChildError e{step, errno};
  ssize_t ignored = write(fd, &e, sizeof(e));
  (void)ignored;
  _exit(127);
}

// Closes every descriptor from 3 up except `keep`. Async-signal-safe.
void CloseDescriptorsFrom3(int keep) {
#ifdef SYS_close_range
  if ((keep <= 3 ||
       syscall(SYS_close_range, 3u, static_cast<unsigned>(keep) - 1, 0u) == 0) &&
      syscall(SYS_close_range, static_cast<unsigned>(keep) + 1, ~0u, 0u) == 0) {
    return;
  }
#endif
  const long top =
      std::min<long>(sysconf(_SC_OPEN_MAX) > 0 ? sysconf(_SC_OPEN_MAX) : 65536, 1 << 20);
  for (int fd = 3; fd < top; ++fd) {
    if (fd != keep) close(fd);
  }
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The descriptors of one run, closed on every path out.
struct Descriptors {
  int in[2] = {-1, -1};   // socketpair: send(MSG_NOSIGNAL) never raises SIGPIPE
  int out[2] = {-1, -1};  // pipes: [0] read end, [1] write end
  int err[2] = {-1, -1};
  int exec_err[2] = {-1, -1};
  ~Descriptors() {
    for (int* pair : {in, out, err, exec_err}) {
      CloseIfOpen(pair[0]);
      CloseIfOpen(pair[1]);
    }
  }
};

}  // namespace

absl::StatusOr<UnixAccount> LookUpUnixAccount(const std::string& name) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot look up user ", name, ": ", std::strerror(rc)));
  }
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no user ", name));
  UnixAccount account;
  account.name = name;
  account.uid = pw.pw_uid;
  account.gid = pw.pw_gid;
  account.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  int n = 64;
  for (int tries = 0; tries < 8; ++tries) {
    account.groups.resize(static_cast<size_t>(n));
    int got = n;
    if (getgrouplist(name.c_str(), pw.pw_gid, account.groups.data(), &got) >= 0) {
      account.groups.resize(static_cast<size_t>(got));
      return account;
    }
    n = std::max(got, n * 2);  // `got` holds the count needed
  }
  return absl::UnavailableError(absl::StrCat("cannot list the groups of user ", name));
}

std::string DescribeExit(const CommandResult& result) {
  if (result.signal != 0) {
    return absl::StrCat("killed by signal ", result.signal, " (",
                        strsignal(result.signal), ")");
  }
  return absl::StrCat("exit code ", result.exit_code);
}

absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    return absl::InvalidArgumentError("RunCommand: argv[0] must be an absolute path");
  }
  const std::string& program = spec.argv[0];
  // Everything the child needs is prepared before fork.
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = spec.env;
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string dir = spec.working_dir.empty() ? "/" : spec.working_dir;
  std::vector<gid_t> groups;
  if (spec.run_as) groups = spec.run_as->groups;

  Descriptors fds;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.in) != 0 ||
      pipe2(fds.out, O_CLOEXEC) != 0 || pipe2(fds.err, O_CLOEXEC) != 0 ||
      pipe2(fds.exec_err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("RunCommand: pipe: ", std::strerror(errno)));
  }

  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Async-signal-safe calls only from here on.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(fds.in[1], STDIN_FILENO);
    dup2(fds.out[1], STDOUT_FILENO);
    dup2(fds.err[1], STDERR_FILENO);
    CloseDescriptorsFrom3(fds.exec_err[1]);
    if (spec.run_as) {
      if (setgroups(groups.size(), groups.data()) != 0)
        ChildFail(fds.exec_err[1], kSetGroups);
      if (setgid(spec.run_as->gid) != 0) ChildFail(fds.exec_err[1], kSetGid);
      if (setuid(spec.run_as->uid) != 0) ChildFail(fds.exec_err[1], kSetUid);
      if (spec.run_as->uid != 0 && setuid(0) == 0) ChildFail(fds.exec_err[1], kKeptRoot);
    }
    if (chdir(dir.c_str()) != 0) ChildFail(fds.exec_err[1], kChdir);
    umask(077);
    execve(program.c_str(), argv.data(), envp.data());
    ChildFail(fds.exec_err[1], kExec);
  }
  CloseIfOpen(fds.in[1]);
  CloseIfOpen(fds.out[1]);
  CloseIfOpen(fds.err[1]);
  CloseIfOpen(fds.exec_err[1]);

  auto reap_blocking = [pid]() {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  };

  // A failure before exec arrives on the error pipe; exec closes it (CLOEXEC).
  ChildError child_error;
  ssize_t got = 0;
  do {
    got = read(fds.exec_err[0], &child_error, sizeof(child_error));
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof(child_error))) {
    reap_blocking();
    const std::string what =
        absl::StrCat("cannot run ", program, ": ", StepName(child_error.step),
                     (spec.run_as ? absl::StrCat(" (as ", spec.run_as->name, ")") : ""),
                     ": ", std::strerror(child_error.err));
    if (child_error.err == ENOENT) return absl::NotFoundError(what);
    if (child_error.err == EACCES || child_error.err == EPERM) {
      return absl::PermissionDeniedError(what);
    }
    return absl::InternalError(what);
  }

  CommandResult result;
  const absl::Time deadline = absl::Now() + spec.timeout;
  size_t sent = 0;
  if (spec.stdin_data.empty()) CloseIfOpen(fds.in[0]);
  bool timed_out = false;
  char buf[16384];
  while (fds.out[0] >= 0 || fds.err[0] >= 0 || fds.in[0] >= 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    pollfd p[3];
    int n = 0;
    int* watched[3];
    for (int* fd : {&fds.in[0], &fds.out[0], &fds.err[0]}) {
      if (*fd < 0) continue;
      p[n] = pollfd{*fd, static_cast<short>(fd == &fds.in[0] ? POLLOUT : POLLIN), 0};
      watched[n++] = fd;
    }
    const int ready = poll(p, n, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < n && ready > 0; ++i) {
      if (p[i].revents == 0) continue;
      int& fd = *watched[i];
      if (&fd == &fds.in[0]) {
        const ssize_t w =
            send(fd, spec.stdin_data.data() + sent, spec.stdin_data.size() - sent,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) sent += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) CloseIfOpen(fd);  // reader left
        if (sent == spec.stdin_data.size()) CloseIfOpen(fd);
        continue;
      }
      const ssize_t r = read(fd, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        CloseIfOpen(fd);
        continue;
      }
      std::string& into = &fd == &fds.out[0] ? result.out : result.err;
      const size_t room =
          spec.max_output_bytes - std::min(into.size(), spec.max_output_bytes);
      into.append(buf, std::min(room, static_cast<size_t>(r)));
    }
  }

  // The outputs are closed: the program has ended or closed them. Wait for
  // its exit until the deadline.
  int status = 0;
  while (!timed_out) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (absl::Now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    reap_blocking();
    return absl::DeadlineExceededError(absl::StrCat(
        program, " did not finish within ", absl::FormatDuration(spec.timeout),
        result.err.empty() ? "" : "; stderr: ", result.err));
  }
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

}  // namespace tessera
