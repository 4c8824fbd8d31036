#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

// Pieces of at most this size per write(2), so that progress moves while a
// large file is written.
constexpr size_t kWriteChunk = size_t{8} << 20;
// The first read's buffer where the size is not known beforehand (/proc, pipes).
constexpr size_t kFirstReadChunk = size_t{64} << 10;

// Closes a descriptor it owns when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now; errno is set when it fails.
  int Close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::StatusCode::kResourceExhausted;
    case EEXIST:
    case ELOOP:
    case EISDIR:
      return absl::StatusCode::kFailedPrecondition;
    case EIO:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "spec file '/x'", or "'/x'" where `what` is empty.
std::string Shown(const std::string& path, const std::string& what) {
  return what.empty() ? absl::StrCat("'", path, "'")
                      : absl::StrCat(what, " '", path, "'");
}

absl::Status ReadError(int err, const std::string& path, const std::string& what) {
  return absl::Status(CodeForErrno(err), absl::StrCat("cannot read ", Shown(path, what),
                                                      ": ", std::strerror(err)));
}

absl::Status TooLarge(const std::string& path, const ReadOptions& options,
                      std::optional<int64_t> size) {
  const std::string cause =
      size.has_value()
          ? absl::StrCat(*size, " bytes, over the limit of ", options.max_bytes)
          : absl::StrCat("over the limit of ", options.max_bytes, " bytes");
  return absl::InvalidArgumentError(
      absl::StrCat("cannot read ", Shown(path, options.what), ": ", cause));
}

absl::Status WriteError(int err, const std::string& path, const std::string& step) {
  return absl::Status(CodeForErrno(err), absl::StrCat("cannot write '", path, "': ", step,
                                                      ": ", std::strerror(err)));
}

// Where the temporary file of `name` goes: hidden, beside it, and named by
// this process and a random number, so concurrent writers never share one.
std::string TemporaryName(const std::string& name) {
  std::random_device entropy;
  return absl::StrFormat(".%s.tmp.%d.%08x", name, ::getpid(), entropy());
}

// How the temporary file is created and what it is given before the data.
struct TargetAttributes {
  mode_t create_mode = 0666;       // to open(2), the umask applying
  std::optional<mode_t> set_mode;  // then exactly this, by fchmod(2)
  std::optional<uid_t> uid;        // then this owner, where permitted
  std::optional<gid_t> gid;
};

TargetAttributes AttributesFor(int dir_fd, const std::string& name,
                               const WriteOptions& options) {
  TargetAttributes attributes;
  if (options.mode.has_value()) {
    attributes.create_mode = *options.mode;
    attributes.set_mode = *options.mode;
    return attributes;
  }
  struct stat st {};
  // A link in the target's place is replaced by the rename, not followed: a
  // new file then.
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISREG(st.st_mode)) {
    attributes.create_mode = 0600;  // never more open than the file it replaces
    attributes.set_mode = st.st_mode & 07777;
    attributes.uid = st.st_uid;
    attributes.gid = st.st_gid;
  }
  return attributes;
}

// The owner, then the mode (a change of owner clears set-id bits), of the
// open temporary file. A kept owner is best effort: only root may give a file
// away (then the group alone is kept, where this process is in it), and the
// file becomes this process's, as with any rename.
absl::Status ApplyAttributes(int fd, const TargetAttributes& attributes,
                             const std::string& path, const std::string& temp) {
  if (attributes.uid.has_value()) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 &&
        (st.st_uid != *attributes.uid || st.st_gid != *attributes.gid) &&
        ::fchown(fd, *attributes.uid, *attributes.gid) != 0) {
      (void)::fchown(fd, static_cast<uid_t>(-1), *attributes.gid);
    }
  }
  if (attributes.set_mode.has_value() && ::fchmod(fd, *attributes.set_mode) != 0) {
    return WriteError(errno, path, absl::StrCat("setting the mode of ", temp));
  }
  return absl::OkStatus();
}

absl::Status WriteParts(int fd, std::span<const std::string_view> parts,
                        const WriteOptions& options, const std::string& path,
                        const std::string& temp) {
  int64_t written = 0;
  for (const std::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      const ssize_t n =
          ::write(fd, part.data() + done, std::min(kWriteChunk, part.size() - done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return WriteError(n < 0 ? errno : EIO, path, absl::StrCat("writing ", temp));
      }
      done += static_cast<size_t>(n);
      written += n;
      if (options.progress) options.progress(written);
    }
  }
  return absl::OkStatus();
}

// The temporary file `temp`, created: its attributes, its data, synced and
// closed. The caller removes it when this fails.
absl::Status FillTemporary(FdCloser& fd, const TargetAttributes& attributes,
                           std::span<const std::string_view> parts,
                           const WriteOptions& options, WriteEnv& env,
                           const std::string& path, const std::string& temp) {
  if (absl::Status s = ApplyAttributes(fd.get(), attributes, path, temp); !s.ok())
    return s;
  if (absl::Status s = WriteParts(fd.get(), parts, options, path, temp); !s.ok())
    return s;
  if (env.Fsync(fd.get()) != 0) {
    return WriteError(errno, path, absl::StrCat("syncing ", temp));
  }
  if (fd.Close() != 0) return WriteError(errno, path, absl::StrCat("closing ", temp));
  return absl::OkStatus();
}

// WriteFileAtomicallyAt with the target's path for messages given whole.
absl::Status WriteAt(int dir_fd, const std::string& name, const std::string& path,
                     std::span<const std::string_view> parts,
                     const WriteOptions& options) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write '", path, "': not a file name"));
  }
  WriteEnv& env = options.env != nullptr ? *options.env : WriteEnv::Default();
  const TargetAttributes attributes = AttributesFor(dir_fd, name, options);
  const std::string temp = TemporaryName(name);
  FdCloser fd(env.OpenAt(dir_fd, temp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         attributes.create_mode));
  if (fd.get() < 0) {
    return WriteError(errno, path, absl::StrCat("creating the temporary file ", temp));
  }
  absl::Status status = FillTemporary(fd, attributes, parts, options, env, path, temp);
  if (status.ok() && env.RenameAt(dir_fd, temp.c_str(), name.c_str()) != 0) {
    status = WriteError(errno, path, absl::StrCat("renaming ", temp, " over it"));
  }
  if (!status.ok()) {
    (void)::unlinkat(dir_fd, temp.c_str(), 0);
    return status;
  }
  // The rename is on disk only once the directory is.
  if (env.Fsync(dir_fd) != 0) return WriteError(errno, path, "syncing its directory");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  return ReadFile(path, ReadOptions{.max_bytes = max_bytes});
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const ReadOptions& options) {
  FdCloser fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ReadError(errno, path, options.what);
  return ReadOpenFile(fd.get(), path, options);
}

absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path,
                                         const ReadOptions& options) {
  // The buffer never grows past one byte over the bound: that byte tells a
  // file over it.
  const size_t cap = options.max_bytes == SIZE_MAX ? SIZE_MAX : options.max_bytes + 1;
  size_t want = kFirstReadChunk;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    if (static_cast<uint64_t>(st.st_size) > options.max_bytes) {
      return TooLarge(path, options, st.st_size);
    }
    want = static_cast<size_t>(st.st_size) + 1;  // + 1: the read that sees the end
  }
  std::string data(std::min(want, cap), '\0');
  size_t done = 0;
  for (;;) {
    if (done == data.size()) {
      if (data.size() >= cap) return TooLarge(path, options, std::nullopt);
      data.resize(std::min(cap, std::max(data.size() * 2, kFirstReadChunk)));
    }
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ReadError(errno, path, options.what);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > options.max_bytes) return TooLarge(path, options, std::nullopt);
  data.resize(done);
  return data;
}

absl::StatusOr<std::string> ReadFileRange(const std::string& path, int64_t offset,
                                          size_t length) {
  absl::StatusOr<RandomAccessFile> file = RandomAccessFile::Open(path);
  if (!file.ok()) return file.status();
  std::string data(length, '\0');
  absl::StatusOr<size_t> got = file->ReadAt(offset, length, data.data());
  if (!got.ok()) return got.status();
  data.resize(*got);
  return data;
}

absl::StatusOr<RandomAccessFile> RandomAccessFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadError(errno, path, "");
  return RandomAccessFile(path, fd);
}

RandomAccessFile::RandomAccessFile(RandomAccessFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

RandomAccessFile& RandomAccessFile::operator=(RandomAccessFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> RandomAccessFile::ReadAt(int64_t offset, size_t length,
                                                void* dst) const {
  if (offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", path_, "' at byte ", offset));
  }
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd_, out + done, length - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("cannot read '", path_, "' at byte ",
                                              offset + static_cast<int64_t>(done), ": ",
                                              std::strerror(errno)));
    }
    if (n == 0) break;  // the end of the file
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::Status RandomAccessFile::ReadExactly(int64_t offset, size_t length,
                                           void* dst) const {
  absl::StatusOr<size_t> got = ReadAt(offset, length, dst);
  if (!got.ok()) return got.status();
  if (*got < length) {
    return absl::DataLossError(absl::StrCat("cannot read '", path_,
                                            "': truncated: ", length, " bytes at byte ",
                                            offset, " reach past its end"));
  }
  return absl::OkStatus();
}

WriteEnv& WriteEnv::Default() {
  static WriteEnv env;  // stateless
  return env;
}

int WriteEnv::OpenAt(int dir_fd, const char* name, int flags, mode_t mode) {
  return ::openat(dir_fd, name, flags, mode);
}

int WriteEnv::Fsync(int fd) { return ::fsync(fd); }

int WriteEnv::RenameAt(int dir_fd, const char* from, const char* to) {
  return ::renameat(dir_fd, from, dir_fd, to);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 const WriteOptions& options) {
  return WriteFileAtomicallyFromParts(path, std::span<const std::string_view>(&data, 1),
                                      options);
}

absl::Status WriteFileAtomicallyFromParts(const std::string& path,
                                          std::span<const std::string_view> parts,
                                          const WriteOptions& options) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  FdCloser dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return WriteError(errno, path, "opening its directory");
  return WriteAt(dir_fd.get(), name, path, parts, options);
}

absl::Status WriteFileAtomicallyAt(int dir_fd, const std::string& dir_path,
                                   const std::string& name,
                                   std::span<const std::string_view> parts,
                                   const WriteOptions& options) {
  return WriteAt(dir_fd, name, absl::StrCat(dir_path, "/", name), parts, options);
}

}  // namespace tessera
