#include "worker/credential_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
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
  absl::StatusOr<std::string> text =
      ReadOpenFile(fd.get(), shown, {.max_bytes = kMaxWorkerCredentialBytes});
  if (absl::IsInvalidArgument(text.status())) {
    return absl::FailedPreconditionError(absl::StrCat(shown, " is too long"));
  }
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

absl::Status SaveWorkerCredential(const std::string& state_dir, const std::string& name,
                                  const std::string& credential) {
  RETURN_IF_ERROR(CheckWorkerName(name));
  ASSIGN_OR_RETURN(ScopedFd dir, OpenPrivateDir(state_dir, "state dir"));
  const std::string file_name = WorkerCredentialFileName(name);
  const std::string text = credential + "\n";
  const std::string_view parts[] = {text};
  return WriteFileAtomicallyAt(dir.get(), state_dir, file_name, parts, {.mode = 0600});
}

}  // namespace tessera
