#include "worker/work_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

// Deepest directory nesting RemoveTreeAt descends into (one descriptor per level).
constexpr int kMaxRemoveDepth = 128;
// Times RemoveTreeAt lists a directory again when entries keep appearing.
constexpr int kMaxRemoveRounds = 8;

std::string Mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// OK when `st` is a directory of the worker's effective uid that group and
// others cannot write.
absl::Status CheckOwnDir(const struct stat& st, const std::string& shown) {
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(shown, " is not a directory"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        shown, " belongs to uid ", st.st_uid, ", not to the worker's uid ", ::geteuid(),
        ": whoever owns it could plant links there that the worker would act on; use a "
        "directory of the worker's own account, or chown it"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, " has mode ", Mode(st.st_mode),
                     ", writable by group or others, who could plant links there that "
                     "the worker would act on; chmod go-w it"));
  }
  return absl::OkStatus();
}

absl::Status Errno(const std::string& what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status RemoveTreeAt(int dir_fd, const std::string& name, int depth) {
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) {
    return absl::OkStatus();
  }
  if (errno != EISDIR && errno != EPERM) return Errno("cannot remove " + name, errno);
  // A directory (unlinkat refuses those): empty it through its own descriptor.
  if (depth >= kMaxRemoveDepth) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot remove ", name, ": nested deeper than ", kMaxRemoveDepth, " levels"));
  }
  for (int round = 0; round < kMaxRemoveRounds; ++round) {
    const int fd =
        ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return absl::OkStatus();
      if (errno == ELOOP || errno == ENOTDIR) {
        // Swapped for a symlink or a file since: remove that, follow nothing.
        if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) {
          return absl::OkStatus();
        }
      }
      return Errno("cannot open " + name, errno);
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      const int err = errno;
      ::close(fd);
      return Errno("cannot list " + name, err);
    }
    std::vector<std::string> children;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string child = entry->d_name;
      if (child != "." && child != "..") children.push_back(child);
    }
    absl::Status status;
    for (const std::string& child : children) {
      status = RemoveTreeAt(::dirfd(dir), child, depth + 1);
      if (!status.ok()) break;
    }
    ::closedir(dir);
    RETURN_IF_ERROR(status);
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) {
      return absl::OkStatus();
    }
    if (errno == ENOTDIR) {  // replaced by a symlink or file meanwhile
      if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) {
        return absl::OkStatus();
      }
      return Errno("cannot remove " + name, errno);
    }
    if (errno != ENOTEMPTY && errno != EEXIST) {
      return Errno("cannot remove " + name, errno);
    }
    // Something was added while it was emptied: list it again.
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot remove ", name, ": entries keep appearing in it"));
}

}  // namespace

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<ScopedFd> OpenWorkDir(const std::string& path) {
  ASSIGN_OR_RETURN(ScopedFd fd, OpenPrivateDir(path, "work dir"));
  // Ranks of other accounts open their own files below it: they need to pass
  // through (search), never to list it. A 0700 work dir becomes 0711.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot inspect work dir " + path, errno);
  if ((st.st_mode & 0011) != 0011 &&
      ::fchmod(fd.get(), (st.st_mode & 07777) | 0011) != 0) {
    return Errno("cannot give work dir " + path + " search permission", errno);
  }
  return fd;
}

absl::StatusOr<ScopedFd> OpenPrivateDir(const std::string& path,
                                        const std::string& what) {
  if (path.empty())
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " is empty"));
  const std::string shown = absl::StrCat(what, " ", path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    if (::mkdir(path.c_str(), 0711) != 0 && errno != EEXIST) {
      return Errno("cannot create " + shown, errno);
    }
  }
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Errno("cannot open " + shown, errno);
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot inspect " + shown, errno);
  RETURN_IF_ERROR(CheckOwnDir(st, shown));
  return fd;
}

absl::StatusOr<ScopedFd> OpenOwnDirAt(int parent_fd, const std::string& name,
                                      const std::string& shown) {
  if (::mkdirat(parent_fd, name.c_str(), 0711) != 0 && errno != EEXIST) {
    return Errno("cannot create " + shown, errno);
  }
  ScopedFd fd(
      ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat(shown,
                       " is a symlink or not a directory; the worker does not "
                       "follow it (remove it)"));
    }
    return Errno("cannot open " + shown, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot inspect " + shown, errno);
  RETURN_IF_ERROR(CheckOwnDir(st, shown));
  return fd;
}

absl::StatusOr<ScopedFd> OpenAttemptDir(const std::string& work_dir, int64_t job_id,
                                        int32_t attempt) {
  ASSIGN_OR_RETURN(ScopedFd root, OpenWorkDir(work_dir));
  const std::string job = absl::StrCat("job-", job_id);
  ASSIGN_OR_RETURN(ScopedFd job_fd,
                   OpenOwnDirAt(root.get(), job, absl::StrCat(work_dir, "/", job)));
  const std::string name = absl::StrCat("attempt-", attempt);
  return OpenOwnDirAt(job_fd.get(), name, absl::StrCat(work_dir, "/", job, "/", name));
}

absl::Status RemoveTreeAt(int dir_fd, const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not a name within a directory"));
  }
  return RemoveTreeAt(dir_fd, name, 0);
}

absl::Status WriteCredentialAt(int attempt_fd, const std::string& name,
                               const std::string& credential,
                               const std::optional<UnixAccount>& owner) {
  RETURN_IF_ERROR(RemoveTreeAt(attempt_fd, name));
  if (::mkdirat(attempt_fd, name.c_str(), 0700) != 0) {
    return Errno("cannot create " + name, errno);
  }
  ScopedFd dir(::openat(attempt_fd, name.c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return Errno("cannot open " + name, errno);
  ScopedFd file(::openat(dir.get(), "credential",
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (file.get() < 0) return Errno("cannot create " + name + "/credential", errno);
  if (::fchmod(file.get(), 0600) != 0 ||
      ::write(file.get(), credential.data(), credential.size()) !=
          static_cast<ssize_t>(credential.size())) {
    return Errno("cannot write " + name + "/credential", errno);
  }
  // The owner gets the directory only once the file in it is complete, so
  // that the trainer can remove the file after reading it.
  if (owner && (::fchown(file.get(), owner->uid, owner->gid) != 0 ||
                ::fchown(dir.get(), owner->uid, owner->gid) != 0)) {
    return Errno("cannot give " + name + " to user " + owner->name, errno);
  }
  return absl::OkStatus();
}

absl::Status MakeRankDirAt(int attempt_fd, const std::string& name,
                           const std::optional<UnixAccount>& owner) {
  RETURN_IF_ERROR(RemoveTreeAt(attempt_fd, name));
  if (::mkdirat(attempt_fd, name.c_str(), 0750) != 0) {
    return Errno("cannot create " + name, errno);
  }
  ScopedFd dir(::openat(attempt_fd, name.c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return Errno("cannot open " + name, errno);
  if (owner && ::fchown(dir.get(), owner->uid, owner->gid) != 0) {
    return Errno("cannot give " + name + " to user " + owner->name, errno);
  }
  return absl::OkStatus();
}

}  // namespace tessera
