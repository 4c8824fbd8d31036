// CgroupTree: one cgroup v2 group per job attempt, so that stopping a job
// reaches every process its ranks started, even ones that left the rank's
// process group (setsid, daemonised helpers).
//
// The tree lives under the worker's own cgroup: <cgroup2 mount><own path>/
// tessera-<worker>-<pid>/job-J-attempt-A. The cgroup2 mount is found in
// /proc/self/mountinfo (/sys/fs/cgroup on modern hosts, /sys/fs/cgroup/unified
// on hybrid ones). Under systemd the worker's unit needs Delegate=yes. Where no
// writable cgroup2 exists, Create fails and the worker falls back to process
// groups with a warning.
//
// A job with memory_per_rank puts each rank in a group of its own below the
// attempt's, job-J-attempt-A/rank-R, with memory.max set (EnsureRankGroup).
// That needs the memory controller in the tree root's cgroup.controllers,
// i.e. delegated by the worker's own cgroup (HasMemoryController); without
// it the worker limits the rank with RLIMIT_DATA instead (memory_limit.h).
// The attempt's Kill, Pids and Remove take in its rank groups.
//
// A worker killed with SIGKILL cannot empty its tree. Its trainers die with it
// (PR_SET_PDEATHSIG, supervisor.h), but what they started may live on in the
// attempt groups. So Create first reaps the trees of earlier workers of the
// same name whose process is gone (ReapLeftovers): a restarted worker leaves
// nothing of its predecessor's ranks running. (Under systemd the unit's
// cgroup is emptied when its main process dies anyway.)
//
// Thread-safety: thread-compatible; the worker agent's loop thread owns it.
#ifndef TESSERA_WORKER_CGROUP_H_
#define TESSERA_WORKER_CGROUP_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// The cgroup2 mount point named in mountinfo text, if any.
std::optional<std::string> FindCgroup2Mount(const std::string& mountinfo);
// The unified-hierarchy path ("0::/path" line) of /proc/self/cgroup text.
std::string OwnCgroupPath(const std::string& proc_self_cgroup);
// The "oom_kill N" count of memory.events text; 0 when absent.
int64_t OomKillsIn(const std::string& memory_events);

class CgroupTree {
 public:
  // Finds the hierarchy and creates <...>/tessera-<worker_name>-<pid>. Unavailable
  // when there is no writable cgroup2.
  static absl::StatusOr<std::unique_ptr<CgroupTree>> Create(
      const std::string& worker_name);
  // For tests: a tree rooted at an existing directory.
  static absl::StatusOr<std::unique_ptr<CgroupTree>> CreateAt(const std::string& root);

  struct Leftovers {
    int trees = 0;      // trees of dead workers removed (or tried)
    int processes = 0;  // processes found in them and killed
  };
  // Kills every process in, and removes, each tree `parent`/tessera-
  // <worker_name>-<pid> whose <pid> is no live process (a worker of that name
  // that died without cleaning up). Trees of live processes are left alone.
  static Leftovers ReapLeftovers(const std::string& parent,
                                 const std::string& worker_name);

  // Removes the (then empty) root directory.
  ~CgroupTree();
  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

  const std::string& root() const { return root_; }
  // Directory of the attempt's group, created if missing.
  absl::StatusOr<std::string> EnsureGroup(int64_t job_id, int32_t attempt);
  // Whether the memory controller is delegated to the tree: "memory" is in
  // the root's cgroup.controllers.
  bool HasMemoryController() const;
  // The rank's own group below `attempt_group` (EnsureGroup's), created if
  // missing, with memory.max = `memory_max` bytes, no swap (memory.swap.max
  // 0, so that the limit ends in an OOM kill rather than in swapping) and
  // memory.oom.group 1 (an OOM kill takes the whole rank). Enables the memory
  // controller for the root's and the attempt's children first; from then on
  // the attempt group itself holds no process, only rank groups.
  // Unavailable when a file cannot be written.
  absl::StatusOr<std::string> EnsureRankGroup(const std::string& attempt_group,
                                              int32_t rank, int64_t memory_max);
  // The memory controller's OOM kills in `group` so far (memory.events
  // oom_kill); 0 when it has no such file.
  int64_t OomKills(const std::string& group) const;
  // Kills every process in the group and its rank groups (cgroup.kill).
  absl::Status Kill(const std::string& group);
  // Pids in the group and its rank groups.
  std::vector<pid_t> Pids(const std::string& group) const;
  // Removes the group's directory, its rank groups first; FailedPrecondition
  // while it has processes.
  absl::Status Remove(const std::string& group);

 private:
  explicit CgroupTree(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_CGROUP_H_
