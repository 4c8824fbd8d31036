// Writes the tar shards of a WebDataset-style dataset, through libarchive's
// pax writer in its restricted form (as bsdtar --format=pax writes): a plain
// ustar header per member (mode 0644, uid/gid 0, the given mtime), and a pax
// 'x' header before it only where ustar cannot hold the member: a name over
// 100 bytes (that ustar's prefix field cannot split), or one that is not ASCII
// (written as its bytes with hdrcharset=BINARY, since the process's C locale
// names no charset to translate from). Data is padded to 512 bytes and the
// archive ends with two zero blocks, padded to a 10240-byte record as GNU tar
// writes. `tar`, Python's tarfile and the webdataset package read the result.
//
//   ASSIGN_OR_RETURN(auto tar, TarWriter::Create(dir + "/train-000000.tar"));
//   RETURN_IF_ERROR(tar->Add("00000000.jpg", jpeg_bytes));
//   RETURN_IF_ERROR(tar->Add("00000000.cls", "3"));
//   RETURN_IF_ERROR(tar->Finish());
//
// The file is written in place; a writer destroyed without Finish leaves an
// archive without its end. Errors: Internal for I/O failures (with errno's
// text), InvalidArgument for an empty name or one with a NUL byte,
// FailedPrecondition after Finish. Used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_
#define TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct archive;

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

  // The archive's bytes so far (headers, data, padding; after Finish, the
  // file's size).
  int64_t bytes_written() const;

 private:
  struct ArchiveFree {
    void operator()(archive* a) const;
  };

  explicit TarWriter(std::string path);

  absl::Status Failure(absl::string_view doing) const;

  const std::string path_;
  std::unique_ptr<archive, ArchiveFree> archive_;
  bool finished_ = false;
  int64_t final_bytes_ = 0;  // set by Finish
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_TAR_WRITER_H_
