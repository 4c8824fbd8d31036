#include "worker/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process/child_setup.h"
#include "spdlog/spdlog.h"
#include "worker/exit_detail.h"

namespace tessera {

namespace {

std::string NameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Appends one line to a rank's log before the rank writes to it.
void AppendToLog(const std::string& path, const std::string& line) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return;
  const std::string text = line + "\n";
  ssize_t ignored = write(fd, text.data(), text.size());
  (void)ignored;
  close(fd);
}

// Why the child could not be started, from the step that failed and its errno.
absl::Status ChildStepError(const ProcessSpec& spec, ChildStep step, int error) {
  const char* why = std::strerror(error);
  const std::string user = spec.run_as ? spec.run_as->name : "";
  switch (step) {
    case ChildStep::kJoinCgroup:
      return absl::UnavailableError(
          absl::StrCat("cannot join cgroup ", spec.cgroup, ": ", why));
    case ChildStep::kLimitData:
      return absl::UnavailableError(absl::StrCat("cannot set RLIMIT_DATA to ",
                                                 spec.data_limit_bytes, " bytes: ", why));
    case ChildStep::kSetGroups:
      return absl::PermissionDeniedError(
          absl::StrCat("cannot set the groups of user ", user, ": ", why));
    case ChildStep::kSetGid:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot switch to group ", spec.run_as->gid, " of user ", user, ": ", why));
    case ChildStep::kSetUid:
    case ChildStep::kKeptRoot:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot switch to user ", user, " (uid ", spec.run_as->uid, "): ", why));
    default:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot execute ", spec.argv[0], spec.run_as ? " as user " + user : "", ": ", why));
}

}  // namespace

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
  ChildSetup setup;
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.stdin_fd = null_fd;
  setup.stdout_fd = log_fd;
  setup.stderr_fd = log_fd;
  setup.cgroup_procs_fd = cgroup_fd;
  setup.data_limit_bytes = spec.data_limit_bytes;
  setup.run_as = spec.run_as ? &*spec.run_as : nullptr;
  // Die with the worker, even if it is SIGKILLed.
  setup.die_with_parent = true;
  absl::StatusOr<SpawnedChild> child = SpawnChild(setup);
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (cgroup_fd >= 0) close(cgroup_fd);
  if (!child.ok()) return child.status();
  if (!child->failed_step) return child->pid;
  return ChildStepError(spec, *child->failed_step, child->error);
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
  proc.memory =
      ChooseMemoryLimit(spec.memory_limit_bytes, cgroups_, proc.cgroup, key.rank);
  if (proc.memory.mechanism == MemoryMechanism::kCgroup) spec.cgroup = proc.memory.group;
  if (proc.memory.mechanism == MemoryMechanism::kRlimitData) {
    spec.data_limit_bytes = proc.memory.bytes;
  }
  if (!proc.memory.log_line.empty()) {
    AppendToLog(spec.log_path, proc.memory.log_line);
    spdlog::info("job {} attempt {} rank {}: {}", key.job_id, key.attempt, key.rank,
                 proc.memory.log_line);
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
      NoteOutOfMemory(proc);
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

void Supervisor::NoteOutOfMemory(RankProcess& proc) const {
  if (proc.memory.mechanism == MemoryMechanism::kNone) return;
  const bool failed = proc.exit.signal != 0 || proc.exit.exit_code != 0;
  const int64_t oom_kills = cgroups_ != nullptr && !proc.memory.group.empty()
                                ? cgroups_->OomKills(proc.memory.group)
                                : 0;
  const std::string reason = OutOfMemoryReason(proc.key.rank, proc.memory, failed,
                                               oom_kills, ReadLogTail(proc.log_path));
  if (reason.empty()) return;
  spdlog::warn("job {} attempt {}: {}", proc.key.job_id, proc.key.attempt, reason);
  std::string detail =
      proc.exit_detail.empty() ? reason : reason + ": " + proc.exit_detail;
  if (detail.size() > kMaxExitDetail) detail.resize(kMaxExitDetail);
  proc.exit_detail = std::move(detail);
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
