// Reading and writing files: the one place the tree does either.
//
// ReadFile reads a file whole, up to a bound, so that no file from outside can
// make a process buffer without limit. RandomAccessFile and ReadFileRange read
// byte ranges (a ZeRO shard's tensors, a tar member). Every error, of a read
// or a write, names the path and the cause, with a code that says which:
// NotFound (no such file or directory), PermissionDenied, InvalidArgument
// (larger than the bound), ResourceExhausted (the disk or the quota is full),
// DataLoss (an I/O error, a file shorter than the range asked for),
// FailedPrecondition (a directory, a link where none may be), Internal
// otherwise.
//
//   absl::StatusOr<std::string> spec = ReadFile(path, {.max_bytes = 1 << 20,
//                                                      .what = "spec file"});
//
// WriteFileAtomically replaces a file so that a reader, or the disk after a
// crash or a power failure, sees the old contents or the new, never a mix and
// never nothing: the data goes to a temporary file in the same directory
// (created O_EXCL|O_NOFOLLOW under a random name, so a link planted there is
// refused, never followed), which is fsynced and renamed over the target, and
// then the directory is fsynced so that the rename itself is on disk. On a
// failure before the rename the target is left as it was and the temporary is
// removed. A failure of the directory's fsync is reported too; the new
// contents are then in place but may not survive a power failure.
//
//   RETURN_IF_ERROR(WriteFileAtomically(path, text));                // mode kept
//   RETURN_IF_ERROR(WriteFileAtomically(path, token, {.mode = 0600}));  // a secret
//
// Mode and owner: by default an existing target's mode is kept, and its owner
// where this process may set it (root, or a group it is in; otherwise the file
// becomes this process's, as with any rename); a new file gets 0666 less the
// umask. With `mode` set the file gets exactly that mode (the umask does not
// apply), and the temporary is created with it, so a secret (0600) is never
// readable by others, not even while it is written.
//
// WriteEnv is the seam for tests: the calls that decide what survives (the
// temporary's creation, the fsyncs, the rename) go through it, so a test can
// fail one or watch them (LevelDB's Env, in small).
//
// Thread-safety: free functions without shared state; a RandomAccessFile may
// be read from several threads at once (pread). Concurrent writes of one path
// do not mix: each renames a whole file of its own, and the last one wins.
#ifndef TESSERA_COMMON_FILE_IO_H_
#define TESSERA_COMMON_FILE_IO_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// ReadFile's bound where none is given: far above any file the tree reads
// whole (checkpoints are the largest), far below what would exhaust memory.
inline constexpr size_t kDefaultMaxReadBytes = size_t{1} << 30;

struct ReadOptions {
  // A larger file is refused (InvalidArgument) without being read whole.
  size_t max_bytes = kDefaultMaxReadBytes;
  // What the file is, for messages: "spec file" makes them "cannot read spec
  // file '<path>': ..."; empty, "cannot read '<path>': ...".
  std::string what;
};

// The contents of the file at `path`.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     size_t max_bytes = kDefaultMaxReadBytes);
absl::StatusOr<std::string> ReadFile(const std::string& path, const ReadOptions& options);

// The rest of the open file `fd` (left open), for a caller that opens and
// checks the file itself (openat without following links, fstat); `path` is
// for messages only.
absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path,
                                         const ReadOptions& options = {});

// Up to `length` bytes at `offset` of the file at `path`: fewer only where the
// file ends first (the caller decides whether that is an error).
absl::StatusOr<std::string> ReadFileRange(const std::string& path, int64_t offset,
                                          size_t length);

// A file open for reading by byte ranges (pread). Movable; closes the file
// when destroyed.
class RandomAccessFile {
 public:
  static absl::StatusOr<RandomAccessFile> Open(const std::string& path);

  RandomAccessFile(RandomAccessFile&& other) noexcept;
  RandomAccessFile& operator=(RandomAccessFile&& other) noexcept;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;
  ~RandomAccessFile();

  const std::string& path() const { return path_; }

  // Reads up to `length` bytes at `offset` into `dst`; returns how many, fewer
  // only where the file ends first.
  absl::StatusOr<size_t> ReadAt(int64_t offset, size_t length, void* dst) const;
  // Exactly `length` bytes at `offset` into `dst`; DataLoss saying "truncated"
  // where the file ends first.
  absl::Status ReadExactly(int64_t offset, size_t length, void* dst) const;

 private:
  RandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
};

// The calls a write makes at the points that decide what survives. The
// defaults are the system calls; a test overrides one to fail it (return -1
// with errno set) or to watch it. Each returns what its system call returns.
class WriteEnv {
 public:
  virtual ~WriteEnv() = default;
  // The real calls; stateless.
  static WriteEnv& Default();

  // openat(2): creates the temporary file `name` in `dir_fd`.
  virtual int OpenAt(int dir_fd, const char* name, int flags, mode_t mode);
  // fsync(2): of the temporary file, then (after the rename) of the directory.
  virtual int Fsync(int fd);
  // renameat(2) within `dir_fd`: the temporary over the target.
  virtual int RenameAt(int dir_fd, const char* from, const char* to);
};

struct WriteOptions {
  // Exactly this mode for the file (0600 for a secret: the temporary is
  // created with it). Unset: an existing target's mode and owner are kept, and
  // a new file gets 0666 less the umask.
  std::optional<mode_t> mode;
  // Called from the writing thread with the bytes written so far, after each
  // piece of at most 8 MiB, so that a large file shows progress.
  std::function<void(int64_t bytes)> progress;
  // The calls to make; null: WriteEnv::Default(). Not owned.
  WriteEnv* env = nullptr;
};

// Replaces the file at `path` with `data` (see the top of this file).
absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 const WriteOptions& options = {});

// The same with the file's bytes given in parts, one after another: a header
// and tensors from where they lie, say, without joining them in memory first.
absl::Status WriteFileAtomicallyFromParts(const std::string& path,
                                          std::span<const std::string_view> parts,
                                          const WriteOptions& options = {});

// The same for the entry `name` of the open directory `dir_fd`, for a caller
// that has opened and checked the directory itself (without following links);
// `dir_path` is for messages only.
absl::Status WriteFileAtomicallyAt(int dir_fd, const std::string& dir_path,
                                   const std::string& name,
                                   std::span<const std::string_view> parts,
                                   const WriteOptions& options = {});

}  // namespace tessera

#endif  // TESSERA_COMMON_FILE_IO_H_
