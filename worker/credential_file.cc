#include "worker/credential_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/worker_fields.h"
#include "worker/work_dir.h"

namespace tessera {
namespace {

absl::Status Errno(const std::string& what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

std::string WorkerCredentialFileName(const std::string& name) {
  return absl::StrCat("worker-", name, ".credential");
}

absl::StatusOr<std::string> LoadWorkerCredential(const std::string& state_dir,
                                                 const std::string& name) {
  RETURN_IF_ERROR(CheckWorkerName(name));
  ASSIGN_OR_RETURN(ScopedFd dir, OpenPrivateDir(state_dir, "state dir"));
  const std::string file_name = WorkerCredentialFileName(name);
  const std::string shown = absl::StrCat(state_dir, "/", file_name);
  ScopedFd fd(::openat(dir.get(), file_name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::string();
    return Errno("cannot open " + shown, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot inspect " + shown, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown,
                     " must be a file of the worker's own user that only it can read "
                     "(mode 0600); remove it and the worker registers anew with the "
                     "join token"));
  }
  std::string text(kMaxWorkerCredentialBytes + 1, '\0');
  ssize_t n;
  do {
    n = ::read(fd.get(), text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("cannot read " + shown, errno);
  text.resize(static_cast<size_t>(n));
  if (text.size() > kMaxWorkerCredentialBytes) {
    return absl::FailedPreconditionError(absl::StrCat(shown, " is too long"));
  }
  return std::string(absl::StripAsciiWhitespace(text));
}

absl::Status SaveWorkerCredential(const std::string& state_dir, const std::string& name,
                                  const std::string& credential) {
  RETURN_IF_ERROR(CheckWorkerName(name));
  ASSIGN_OR_RETURN(ScopedFd dir, OpenPrivateDir(state_dir, "state dir"));
  const std::string file_name = WorkerCredentialFileName(name);
  const std::string tmp_name = file_name + ".tmp";
  const std::string shown = absl::StrCat(state_dir, "/", tmp_name);
  if (::unlinkat(dir.get(), tmp_name.c_str(), 0) != 0 && errno != ENOENT) {
    return Errno("cannot remove " + shown, errno);
  }
  {
    ScopedFd fd(::openat(dir.get(), tmp_name.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd.get() < 0) return Errno("cannot create " + shown, errno);
    const std::string text = credential + "\n";
    if (::fchmod(fd.get(), 0600) != 0 ||
        ::write(fd.get(), text.data(), text.size()) !=
            static_cast<ssize_t>(text.size()) ||
        ::fsync(fd.get()) != 0) {
      return Errno("cannot write " + shown, errno);
    }
  }
  if (::renameat(dir.get(), tmp_name.c_str(), dir.get(), file_name.c_str()) != 0) {
    return Errno(absl::StrCat("cannot rename ", shown, " to ", file_name), errno);
  }
  (void)::fsync(dir.get());  // the rename itself is durable
  return absl::OkStatus();
}

}  // namespace tessera
