// The worker's work directory: rank logs (job-J/attempt-A/rank-R.log) and the
// directories that hand each rank its credential (rank-R.private/credential).
//
// A worker usually runs as root and its ranks as other accounts, so the tree
// is walked without trusting names: every level below the work directory is
// opened from its parent's descriptor with openat(O_DIRECTORY | O_NOFOLLOW)
// and created with mkdirat; a level must be a real directory of the worker's
// user that group and others cannot write, or the caller is refused. Owners
// change through descriptors (fchown), never by path, and removal
// (RemoveTreeAt) never follows a symlink, however the tree changes while it
// runs. The work directory itself must belong to the worker's user and not
// be writable by group or others (OpenWorkDir), else the worker refuses to
// start: whoever could write it could plant links that root would follow.
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_WORKER_WORK_DIR_H_
#define TESSERA_WORKER_WORK_DIR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/supervisor.h"

namespace tessera {

// An owned file descriptor, closed on destruction.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Opens the directory `path`, creating it (mode 0711: ranks of other accounts
// may pass through to their own files, not list it) when it does not exist.
// FailedPrecondition, naming `what` and `path`, the problem and the fix,
// unless it is a directory owned by the worker's effective uid that group and
// others cannot write. `path` may itself be a symlink the operator set up.
absl::StatusOr<ScopedFd> OpenPrivateDir(const std::string& path, const std::string& what);

// OpenPrivateDir(path, "work dir"), then gives it search permission for group
// and others (0700 becomes 0711): ranks that run as other accounts must pass
// through it to their own files; they still cannot list it.
absl::StatusOr<ScopedFd> OpenWorkDir(const std::string& path);

// Opens (creating, mode 0711) the directory `name` inside `parent_fd` without
// following a symlink. FailedPrecondition when `name` is a symlink, not a
// directory, not owned by the worker's effective uid or writable by group or
// others; `shown` names it in messages.
absl::StatusOr<ScopedFd> OpenOwnDirAt(int parent_fd, const std::string& name,
                                      const std::string& shown);

// The directory of one attempt: `work_dir`/job-J/attempt-A, each level opened
// or created as OpenOwnDirAt does.
absl::StatusOr<ScopedFd> OpenAttemptDir(const std::string& work_dir, int64_t job_id,
                                        int32_t attempt);

// Removes the entry `name` of the directory `dir_fd` and, when it is a
// directory, everything below it. A symlink is removed, never followed,
// including one swapped in for a directory while the removal runs (each level
// is opened with O_NOFOLLOW from its parent's descriptor). Removing a missing
// entry is OK. Directories nested deeper than 128 levels are refused.
absl::Status RemoveTreeAt(int dir_fd, const std::string& name);

// Writes `credential` to `name`/credential inside the attempt directory
// `attempt_fd`: the directory `name` is removed first (RemoveTreeAt: it may
// be left over from an earlier run and hold whatever its owner put there),
// created afresh with mode 0700, and the file created in it with O_EXCL and
// mode 0600. Both belong to `owner` when set (fchown on their descriptors).
absl::Status WriteCredentialAt(int attempt_fd, const std::string& name,
                               const std::string& credential,
                               const std::optional<UnixAccount>& owner);

// Makes `name` inside the attempt directory `attempt_fd` an empty directory
// (mode 0750) that belongs to `owner` when set, removing what was there first
// (RemoveTreeAt): a folder the rank writes its own files into.
absl::Status MakeRankDirAt(int attempt_fd, const std::string& name,
                           const std::optional<UnixAccount>& owner);

}  // namespace tessera

#endif  // TESSERA_WORKER_WORK_DIR_H_
