#include "common/process/run_command.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process/child_setup.h"

namespace tessera {

namespace {

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The descriptors of one run, closed on every path out.
struct Descriptors {
  int in[2] = {-1, -1};   // socketpair: send(MSG_NOSIGNAL) never raises SIGPIPE
  int out[2] = {-1, -1};  // pipes: [0] read end, [1] write end
  int err[2] = {-1, -1};
  ~Descriptors() {
    for (int* pair : {in, out, err}) {
      CloseIfOpen(pair[0]);
      CloseIfOpen(pair[1]);
    }
  }
};

// What execve needs, prepared before fork: argv and envp point into the
// strings held here, so the object must stay where it was built.
struct ExecArgs {
  explicit ExecArgs(const CommandSpec& spec)
      : args(spec.argv),
        env(spec.env),
        dir(spec.working_dir.empty() ? "/" : spec.working_dir) {
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  std::vector<std::string> args;
  std::vector<std::string> env;
  const std::string dir;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

// The status for a child that failed a step between fork and exec.
absl::Status SpawnFailure(const CommandSpec& spec, const SpawnedChild& child) {
  const std::string what =
      absl::StrCat("cannot run ", spec.argv[0], ": ", ChildStepName(*child.failed_step),
                   (spec.run_as ? absl::StrCat(" (as ", spec.run_as->name, ")") : ""),
                   ": ", std::strerror(child.error));
  if (child.error == ENOENT) return absl::NotFoundError(what);
  if (child.error == EACCES || child.error == EPERM) {
    return absl::PermissionDeniedError(what);
  }
  return absl::InternalError(what);
}

// Opens the stdio descriptors, forks and execs; the parent keeps only its ends.
absl::StatusOr<pid_t> StartChild(const CommandSpec& spec, Descriptors& fds) {
  const ExecArgs exec(spec);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.in) != 0 ||
      pipe2(fds.out, O_CLOEXEC) != 0 || pipe2(fds.err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("RunCommand: pipe: ", std::strerror(errno)));
  }
  ChildSetup setup;
  setup.argv = exec.argv.data();
  setup.envp = exec.envp.data();
  setup.stdin_fd = fds.in[1];
  setup.stdout_fd = fds.out[1];
  setup.stderr_fd = fds.err[1];
  setup.run_as = spec.run_as ? &*spec.run_as : nullptr;
  setup.working_dir = exec.dir.c_str();
  absl::StatusOr<SpawnedChild> child = SpawnChild(setup);
  CloseIfOpen(fds.in[1]);
  CloseIfOpen(fds.out[1]);
  CloseIfOpen(fds.err[1]);
  if (!child.ok()) return child.status();
  if (child->failed_step) return SpawnFailure(spec, *child);
  return child->pid;
}

// Sends what is left of stdin_data without blocking; closes stdin when all is
// sent or the reader has gone.
void FeedStdin(const CommandSpec& spec, int& fd, size_t& sent) {
  const ssize_t w = send(fd, spec.stdin_data.data() + sent, spec.stdin_data.size() - sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w > 0) sent += static_cast<size_t>(w);
  if (w < 0 && errno != EAGAIN && errno != EINTR) CloseIfOpen(fd);  // reader left
  if (sent == spec.stdin_data.size()) CloseIfOpen(fd);
}

// Reads what is ready on an output pipe into `into`, up to max_output_bytes;
// closes the pipe at its end.
void DrainOutput(const CommandSpec& spec, int& fd, std::string& into) {
  char buf[16384];
  const ssize_t r = read(fd, buf, sizeof(buf));
  if (r < 0 && errno == EINTR) return;
  if (r <= 0) {
    CloseIfOpen(fd);
    return;
  }
  const size_t room =
      spec.max_output_bytes - std::min(into.size(), spec.max_output_bytes);
  into.append(buf, std::min(room, static_cast<size_t>(r)));
}

// Feeds stdin and collects stdout and stderr until all three are closed or
// the deadline passes. Returns whether the deadline passed.
bool ExchangeIo(const CommandSpec& spec, absl::Time deadline, Descriptors& fds,
                CommandResult& result) {
  size_t sent = 0;
  if (spec.stdin_data.empty()) CloseIfOpen(fds.in[0]);
  while (fds.out[0] >= 0 || fds.err[0] >= 0 || fds.in[0] >= 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
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
        FeedStdin(spec, fd, sent);
      } else {
        DrainOutput(spec, fd, &fd == &fds.out[0] ? result.out : result.err);
      }
    }
  }
  return false;
}

// Waits for the child's exit until the deadline. Returns whether the deadline
// passed first.
bool WaitForExit(pid_t pid, absl::Time deadline, int& status) {
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return false;
    if (r < 0 && errno != EINTR) return false;
    if (absl::Now() >= deadline) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Kills the child's process group and the child, and reaps it.
void KillAndReap(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

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
  Descriptors fds;
  const absl::StatusOr<pid_t> pid = StartChild(spec, fds);
  if (!pid.ok()) return pid.status();

  CommandResult result;
  const absl::Time deadline = absl::Now() + spec.timeout;
  // The outputs are closed once the program has ended or closed them; then
  // its exit is awaited until the deadline.
  int status = 0;
  if (ExchangeIo(spec, deadline, fds, result) || WaitForExit(*pid, deadline, status)) {
    KillAndReap(*pid);
    return absl::DeadlineExceededError(absl::StrCat(
        spec.argv[0], " did not finish within ", absl::FormatDuration(spec.timeout),
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
