#include "worker/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/exit_detail.h"

namespace tessera {

namespace {

// What the child reports through its error pipe when a step before exec fails.
enum ChildStep : int { kJoinCgroup = 1, kSetGroups, kSetGid, kSetUid, kExec };

struct ChildError {
  int step = 0;
  int err = 0;
};

// Writes the failed step and errno to the pipe, then exits. Async-signal-safe.
[[noreturn]] void ChildFail(int fd, ChildStep step) {
  ChildError e{step, errno};
  ssize_t ignored = write(fd, &e, sizeof(e));
  (void)ignored;
  _exit(127);
}

std::string NameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Closes every descriptor from 3 up, except `keep` (the exec-error pipe, which
// is O_CLOEXEC and closes itself at exec). Async-signal-safe: close_range(2)
// where the kernel has it (5.9+), else the entries of /proc/self/fd read with
// getdents64, else every number below the descriptor limit.
void CloseDescriptorsFrom3(int keep) {
#ifdef SYS_close_range
  bool closed_all = true;
  if (keep > 3) {
    closed_all = syscall(SYS_close_range, 3u, static_cast<unsigned>(keep) - 1, 0u) == 0;
  }
  if (closed_all &&
      syscall(SYS_close_range, static_cast<unsigned>(keep) + 1, ~0u, 0u) == 0) {
    return;
  }
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

}  // namespace

absl::StatusOr<Account> LookUpAccount(const std::string& name) {
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
  Account account;
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

absl::StatusOr<pid_t> PosixLauncher::Launch(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment is exactly the spec's: nothing of the worker's own
  // passes (the worker builds a rank's from an allowlist, RankEnvironment).
  std::vector<std::string> env_storage;
  std::set<std::string> replaced;
  if (spec.run_as) {
    env_storage = {"HOME=" + spec.run_as->home, "USER=" + spec.run_as->name,
                   "LOGNAME=" + spec.run_as->name};
    replaced = {"HOME", "USER", "LOGNAME"};
  }
  for (const std::string& e : spec.env) {
    if (!replaced.contains(NameOf(e))) env_storage.push_back(e);
  }
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = open(spec.log_path.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open log file ", spec.log_path, ": ", std::strerror(errno)));
  }
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int cgroup_fd = -1;
  if (!spec.cgroup.empty()) {
    cgroup_fd = open((spec.cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (cgroup_fd < 0) {
      close(log_fd);
      if (null_fd >= 0) close(null_fd);
      return absl::UnavailableError(absl::StrCat(
          "cannot open ", spec.cgroup, "/cgroup.procs: ", std::strerror(errno)));
    }
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    if (cgroup_fd >= 0) close(cgroup_fd);
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const bool switch_user = spec.run_as.has_value();
  const uid_t uid = switch_user ? spec.run_as->uid : 0;
  const gid_t gid = switch_user ? spec.run_as->gid : 0;
  const std::vector<gid_t> groups =
      switch_user ? spec.run_as->groups : std::vector<gid_t>();
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // Join the attempt's cgroup before exec (and while still root), so that
    // everything the rank starts is inside it from the first instruction.
    if (cgroup_fd >= 0 && write(cgroup_fd, "0", 1) != 1)
      ChildFail(err_pipe[1], kJoinCgroup);
    if (switch_user) {
      // Groups first: once the uid is not root, they can no longer change.
      if (setgroups(groups.size(), groups.data()) != 0)
        ChildFail(err_pipe[1], kSetGroups);
      if (setgid(gid) != 0) ChildFail(err_pipe[1], kSetGid);
      if (setuid(uid) != 0) ChildFail(err_pipe[1], kSetUid);
      // setuid from root drops the saved uid too; make sure of it.
      if (uid != 0 && setuid(0) == 0) {
        errno = EPERM;
        ChildFail(err_pipe[1], kSetUid);
      }
    }
    // Die with the worker, even if it is SIGKILLed. Asked for after the
    // credential change, which clears it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) signal(s, SIG_DFL);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    // Nothing of the worker's reaches the rank but stdin, stdout and stderr:
    // no descriptor it holds (sockets, pipes, files), whether O_CLOEXEC or not.
    CloseDescriptorsFrom3(err_pipe[1]);
    // Files the rank creates (checkpoints in shared roots, its outputs) are
    // its owner's alone unless it says otherwise.
    umask(077);
    execve(argv[0], argv.data(), envp.data());
    ChildFail(err_pipe[1], kExec);
  }
  int fork_errno = errno;
  close(err_pipe[1]);
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (cgroup_fd >= 0) close(cgroup_fd);
  if (pid < 0) {
    close(err_pipe[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);  // also in the parent, so signals sent right away reach the group
  ChildError child;
  ssize_t n;
  do {
    n = read(err_pipe[0], &child, sizeof(child));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == sizeof(child)) {
    int status = 0;
    waitpid(pid, &status, 0);
    const char* why = std::strerror(child.err);
    const std::string user = switch_user ? spec.run_as->name : "";
    switch (child.step) {
      case kJoinCgroup:
        return absl::UnavailableError(
            absl::StrCat("cannot join cgroup ", spec.cgroup, ": ", why));
      case kSetGroups:
        return absl::PermissionDeniedError(
            absl::StrCat("cannot set the groups of user ", user, ": ", why));
      case kSetGid:
        return absl::PermissionDeniedError(
            absl::StrCat("cannot switch to group ", gid, " of user ", user, ": ", why));
      case kSetUid:
        return absl::PermissionDeniedError(
            absl::StrCat("cannot switch to user ", user, " (uid ", uid, "): ", why));
      default:
        break;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", spec.argv[0],
                     switch_user ? " as user " + user : "", ": ", why));
  }
  return pid;
}

void PosixLauncher::SignalGroup(pid_t pgid, int sig) {
  if (pgid > 0) kill(-pgid, sig);
}

void PosixLauncher::Signal(pid_t pid, int sig) {
  if (pid > 0) kill(pid, sig);
}

char ProcStatState(const std::string& stat) {
  // "PID (COMM) S ...": COMM may hold ") ", so look for the last one.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '\0';
  return stat[paren + 2];
}

bool PosixLauncher::IsStopped(pid_t pid) {
  if (pid <= 0) return false;
  char buf[512];
  const int fd = open(absl::StrCat("/proc/", pid, "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n <= 0) return false;
  const char state = ProcStatState(std::string(buf, static_cast<size_t>(n)));
  return state == 'T' || state == 't';
}

std::optional<ProcessExit> PosixLauncher::TryReap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  ProcessExit exit;
  if (r < 0) {
    // Not our child any more (already reaped elsewhere): report it as lost.
    exit.exit_code = 255;
    return exit;
  }
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else {
    exit.exit_code = WEXITSTATUS(status);
  }
  return exit;
}

Supervisor::Supervisor(ProcessLauncher* launcher, const Clock* clock,
                       absl::Duration kill_grace, CgroupTree* cgroups)
    : launcher_(launcher), cgroups_(cgroups), clock_(clock), kill_grace_(kill_grace) {}

absl::Status Supervisor::Start(const RankKey& key, const ProcessSpec& spec_in) {
  RankProcess& proc = ranks_[key];
  proc.key = key;
  proc.log_path = spec_in.log_path;
  ProcessSpec spec = spec_in;
  if (cgroups_ != nullptr) {
    absl::StatusOr<std::string> group = cgroups_->EnsureGroup(key.job_id, key.attempt);
    if (group.ok()) {
      spec.cgroup = *group;
      proc.cgroup = *group;
    } else {
      spdlog::warn("job {} rank {}: no cgroup ({}); relying on its process group",
                   key.job_id, key.rank, group.status().ToString());
    }
  }
  absl::StatusOr<pid_t> pid = launcher_->Launch(spec);
  if (!pid.ok()) {
    proc.exited = true;
    proc.exit.exit_code = 127;
    proc.launch_error = std::string(pid.status().message());
    return pid.status();
  }
  proc.pid = *pid;
  return absl::OkStatus();
}

void Supervisor::Refuse(const RankKey& key, const std::string& reason, int exit_code) {
  RankProcess& proc = ranks_[key];
  proc.key = key;
  proc.exited = true;
  proc.exit.exit_code = exit_code;
  proc.launch_error = reason;
}

void Supervisor::Stop(const RankKey& key) {
  auto it = ranks_.find(key);
  if (it == ranks_.end() || it->second.exited || it->second.kill_deadline) return;
  RankProcess& proc = it->second;
  proc.kill_deadline = clock_->Now() + kill_grace_;
  if (launcher_->IsStopped(proc.pid)) {
    // SIGTERM would stay pending until someone sent SIGCONT.
    spdlog::warn("job {} attempt {} rank {} (pid {}) is stopped; sending SIGKILL",
                 key.job_id, key.attempt, key.rank, proc.pid);
    Kill(proc);
    return;
  }
  launcher_->SignalGroup(proc.pid, SIGTERM);
}

bool Supervisor::Preempt(const RankKey& key) {
  auto it = ranks_.find(key);
  if (it == ranks_.end()) return false;
  RankProcess& proc = it->second;
  if (proc.exited || proc.kill_deadline || proc.preempted || proc.pid <= 0) return false;
  launcher_->Signal(proc.pid, SIGUSR1);
  proc.preempted = true;
  return true;
}

void Supervisor::Kill(RankProcess& proc) {
  proc.killed = true;
  launcher_->SignalGroup(proc.pid, SIGKILL);
  if (cgroups_ != nullptr && !proc.cgroup.empty()) {
    (void)cgroups_->Kill(proc.cgroup);
  }
}

bool Supervisor::Poll() {
  bool any_exit = false;
  const absl::Time now = clock_->Now();
  for (auto& [key, proc] : ranks_) {
    if (proc.exited) continue;
    if (std::optional<ProcessExit> exit = launcher_->TryReap(proc.pid)) {
      proc.exited = true;
      proc.exit = *exit;
      proc.exit_detail = ReadExitDetail(proc.log_path);
      any_exit = true;
      // The trainer may have left children in its group; they go with it.
      launcher_->SignalGroup(proc.pid, SIGKILL);
      continue;
    }
    if (proc.kill_deadline && now >= *proc.kill_deadline) {
      spdlog::warn("job {} rank {} ignored SIGTERM for {}; sending SIGKILL", key.job_id,
                   key.rank, absl::FormatDuration(kill_grace_));
      Kill(proc);
      proc.kill_deadline = now + kill_grace_;
    } else if (proc.kill_deadline && !proc.killed && launcher_->IsStopped(proc.pid)) {
      // Stopped after its SIGTERM was sent: it would never act on it.
      spdlog::warn("job {} attempt {} rank {} (pid {}) is stopped; sending SIGKILL",
                   key.job_id, key.attempt, key.rank, proc.pid);
      Kill(proc);
      proc.kill_deadline = now + kill_grace_;
    }
  }
  if (any_exit || !groups_to_remove_.empty()) CleanUpGroups();
  return any_exit;
}

void Supervisor::CleanUpGroups() {
  if (cgroups_ == nullptr) return;
  std::map<std::string, bool> all_exited;  // group -> every rank in it exited
  for (const auto& [key, proc] : ranks_) {
    if (proc.cgroup.empty()) continue;
    auto [it, inserted] = all_exited.emplace(proc.cgroup, true);
    it->second = it->second && proc.exited;
  }
  for (const auto& [group, done] : all_exited) {
    if (done) groups_to_remove_.insert(group);
  }
  for (auto it = groups_to_remove_.begin(); it != groups_to_remove_.end();) {
    auto state = all_exited.find(*it);
    if (state != all_exited.end() && !state->second) {  // a new rank joined it
      it = groups_to_remove_.erase(it);
      continue;
    }
    // Whatever the ranks left behind goes with them.
    if (!cgroups_->Pids(*it).empty()) (void)cgroups_->Kill(*it);
    if (cgroups_->Remove(*it).ok()) {
      it = groups_to_remove_.erase(it);
    } else {
      ++it;  // still emptying; try again on the next poll
    }
  }
}

void Supervisor::Forget(const RankKey& key) {
  auto it = ranks_.find(key);
  if (it != ranks_.end() && it->second.exited) ranks_.erase(it);
}

void Supervisor::StopAll() {
  for (auto& [key, proc] : ranks_) Stop(key);
  while (running() > 0) {
    Poll();
    if (running() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<RankProcess> Supervisor::Snapshot() const {
  std::vector<RankProcess> out;
  for (const auto& [key, proc] : ranks_) out.push_back(proc);
  return out;
}

int Supervisor::running() const {
  int n = 0;
  for (const auto& [key, proc] : ranks_) n += proc.exited ? 0 : 1;
  return n;
}

}  // namespace tessera
