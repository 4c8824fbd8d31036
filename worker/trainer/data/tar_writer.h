// Writes a POSIX ustar archive of regular files, as plain `tar`, Python's
// tarfile and the webdataset package read it: 512-byte headers (mode 0644,
// uid/gid 0, the given mtime), data padded to 512 bytes, names over 100 bytes
// in a GNU 'L' long-name member, and at the end two zero blocks padded to a
// 10240-byte record, as GNU tar writes.
//
//   ASSIGN_OR_RETURN(auto tar, TarWriter::Create(dir + "/train-000000.tar"));
//   RETURN_IF_ERROR(tar->Add("00000000.jpg", jpeg_bytes));
//   RETURN_IF_ERROR(tar->Add("00000000.cls", "3"));
//   RETURN_IF_ERROR(tar->Finish());
//
// The file is written in place; a writer destroyed without Finish leaves a
// truncated archive. Errors: Internal for I/O failures (with errno's text),
// InvalidArgument for an empty name. Used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_
#define TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::trainer::data {

class TarWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TarWriter>> Create(const std::string& path);
  ~TarWriter();

  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a regular file. `mtime` in seconds since the epoch.
  absl::Status Add(absl::string_view name, absl::string_view data, int64_t mtime = 0);

  // Writes the end of the archive and closes the file.
  absl::Status Finish();

  int64_t bytes_written() const { return written_; }

 private:
  TarWriter(std::FILE* file, std::string path);

  absl::Status Write(const char* data, size_t size);
  absl::Status WriteHeader(absl::string_view name, int64_t size, char type,
                           int64_t mtime);

  std::FILE* file_;
  const std::string path_;
  int64_t written_ = 0;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_
