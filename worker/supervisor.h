// Supervisor: starts trainer processes for ranks and watches them.
//
// A ProcessLauncher does the OS work (fork/exec into a new process group with
// PR_SET_PDEATHSIG, output to a log file, reaping, signalling) behind a small
// interface so tests can substitute a fake. The Supervisor keeps one entry per
// (job, attempt, rank) until the coordinator acknowledges its exit, stops ranks
// with SIGTERM to the whole process group and escalates to SIGKILL after a
// grace period. A stopped rank (SIGSTOP, state 'T' in /proc/PID/stat) would
// never act on SIGTERM, which stays pending: it gets SIGKILL at once. A rank
// asked to checkpoint and leave (Preempt) gets SIGUSR1, once, to its trainer
// process alone.
//
// Ranks die with the worker: the child asks for PR_SET_PDEATHSIG(SIGKILL), so
// a worker killed with SIGKILL takes its trainer processes with it. What a
// trainer started itself does not get that signal; with cgroups it stays in
// the attempt's group, which the next worker of the same name kills on start
// (cgroup.h).
//
// A process may run as another unix account (ProcessSpec::run_as): everything
// about the account is looked up before fork (LookUpUnixAccount), and the
// child joins its cgroup, then switches to the account, and only then asks
// for PR_SET_PDEATHSIG (a change of credentials clears it) and execs. The
// process gets nothing of the worker's but what the spec says: its
// environment is exactly ProcessSpec::env, every descriptor above stderr is
// closed before exec, and its umask is 077. The steps between fork and exec
// are common/process/child_setup.h's (SpawnChild); what is the worker's own
// here is the cgroup, the log file and the account's HOME, USER and LOGNAME.
//
// A rank with a memory limit (ProcessSpec::memory_limit_bytes) gets memory.max
// on a cgroup of its own or RLIMIT_DATA (memory_limit.h); its log's first line
// says which. When it ends out of memory, its exit detail opens with "rank R
// exceeded memory_per_rank ... (out of memory: ...)".
//
// Thread-safety: not thread-safe; the worker agent's loop thread owns it. Fork
// happens on that thread, which lives as long as the ranks: PR_SET_PDEATHSIG
// fires when the forking thread exits.
#ifndef TESSERA_WORKER_SUPERVISOR_H_
#define TESSERA_WORKER_SUPERVISOR_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/process/unix_account.h"
#include "worker/cgroup.h"
#include "worker/memory_limit.h"

namespace tessera {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is the executable path; no shell
  // The whole environment, as "NAME=value" entries: nothing of the worker's
  // own environment is inherited.
  std::vector<std::string> env;
  std::string log_path;  // stdout and stderr are appended here
  std::string cgroup;    // cgroup v2 directory the process starts in; empty: none
  // The job's memory_per_rank in bytes (0: none). The Supervisor picks how it
  // is held (memory_limit.h): a rank cgroup's memory.max, or RLIMIT_DATA.
  int64_t memory_limit_bytes = 0;
  // RLIMIT_DATA the launcher sets on the process (0: none); the Supervisor
  // sets it when the limit cannot be memory.max.
  int64_t data_limit_bytes = 0;
  // Unset: the process runs as the worker does. Set: it runs as this account
  // (needs root), with HOME, USER and LOGNAME set to the account's.
  std::optional<UnixAccount> run_as;
};

struct ProcessExit {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // terminating signal, or 0
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process in a new process group whose id is its pid.
  virtual absl::StatusOr<pid_t> Launch(const ProcessSpec& spec) = 0;
  // Sends `sig` to the process group `pgid`.
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // Sends `sig` to the process `pid` alone.
  virtual void Signal(pid_t pid, int sig) = 0;
  // Whether `pid` is stopped (job control or ptrace stop): a SIGTERM sent to
  // it stays pending until it is continued.
  virtual bool IsStopped(pid_t pid) = 0;
  // Non-blocking: the exit of `pid` if it has ended (and reaps it).
  virtual std::optional<ProcessExit> TryReap(pid_t pid) = 0;
};

// The real launcher: fork + execve.
class PosixLauncher final : public ProcessLauncher {
 public:
  absl::StatusOr<pid_t> Launch(const ProcessSpec& spec) override;
  void SignalGroup(pid_t pgid, int sig) override;
  void Signal(pid_t pid, int sig) override;
  // State 'T' or 't' in /proc/PID/stat.
  bool IsStopped(pid_t pid) override;
  std::optional<ProcessExit> TryReap(pid_t pid) override;
};

// The state letter of /proc/PID/stat text (the field after the command name,
// which may itself hold spaces and parentheses); '\0' when unreadable.
char ProcStatState(const std::string& stat);

struct RankKey {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  auto operator<=>(const RankKey&) const = default;
};

struct RankProcess {
  RankKey key;
  pid_t pid = 0;
  bool exited = false;
  ProcessExit exit;
  std::string launch_error;  // why it could not be started; empty if it was
  std::string log_path;      // where its output goes (ProcessSpec::log_path)
  // Its "exit reason" line, read from the log when it exited (exit_detail.h).
  std::string exit_detail;
  std::optional<absl::Time> kill_deadline;  // set once a stop was requested
  bool preempted = false;                   // SIGUSR1 was sent (Preempt)
  bool killed = false;                      // SIGKILL was sent
  std::string cgroup;                       // the attempt's group, empty without cgroups
  RankMemoryLimit memory;                   // how its memory_per_rank is held
};

class Supervisor {
 public:
  // `launcher`, `clock` and `cgroups` are not owned; `cgroups` may be null
  // (process groups only).
  Supervisor(ProcessLauncher* launcher, const Clock* clock, absl::Duration kill_grace,
             CgroupTree* cgroups = nullptr);
  ~Supervisor() = default;

  bool Has(const RankKey& key) const { return ranks_.contains(key); }
  // Starts a rank. If launching fails, the rank is recorded as exited with
  // code 127 and the reason, so the coordinator learns of it like any other
  // failure.
  absl::Status Start(const RankKey& key, const ProcessSpec& spec);
  // Records a rank that is not started at all (e.g. its job's owner has no
  // account here) as exited with `exit_code` and `reason`.
  void Refuse(const RankKey& key, const std::string& reason, int exit_code = 127);
  // Sends SIGTERM to the rank's process group; SIGKILL follows after the grace.
  // A stopped rank gets SIGKILL at once.
  void Stop(const RankKey& key);
  // Asks a running rank to checkpoint and exit (the preempted exit code): sends
  // SIGUSR1 to its trainer process, not to its group (what the trainer started
  // is the trainer's business). Once per rank: returns true when it sent it
  // now, false for a rank already asked, stopping, exited or unknown.
  bool Preempt(const RankKey& key);
  // Reaps exited ranks and escalates overdue stops; a rank being stopped that
  // is found stopped (SIGSTOP after its SIGTERM) gets SIGKILL at once. Returns
  // true if a rank exited.
  bool Poll();
  // Drops an exited rank (its exit was acknowledged by the coordinator).
  void Forget(const RankKey& key);
  // Stops every running rank and waits until all have exited (SIGKILL after the grace).
  void StopAll();
  std::vector<RankProcess> Snapshot() const;
  int running() const;

 private:
  // Kills what is left in an attempt's group once all its ranks here exited,
  // and removes the group.
  void CleanUpGroups();
  // SIGKILL to the rank's process group and its attempt's cgroup.
  void Kill(RankProcess& proc);
  // Puts the out-of-memory reason before an exited rank's exit detail when
  // it ended past its memory limit.
  void NoteOutOfMemory(RankProcess& proc) const;

  ProcessLauncher* const launcher_;  // Not owned.
  CgroupTree* const cgroups_;        // Not owned; may be null.
  const Clock* const clock_;         // Not owned.
  const absl::Duration kill_grace_;
  std::map<RankKey, RankProcess> ranks_;
  std::set<std::string> groups_to_remove_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SUPERVISOR_H_
