// A streaming reader of the tar shards of a WebDataset-style dataset, over
// libarchive's tar reader: POSIX ustar, GNU tar (long names in 'L' members,
// base-256 numbers) and pax ('x' headers: long or UTF-8 paths, sizes). It
// yields the archive's regular files in order, with their data; directories,
// links, devices, sparse files and global pax headers are passed over. Only
// uncompressed archives are read: a member's data lies in the file at
// data_offset, so a loader can pread it later.
//
//   ASSIGN_OR_RETURN(auto reader, TarReader::OpenFile("train-000000.tar"));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<TarMember> m, reader->Next());
//     if (!m) break;  // end of the archive
//     Use(m->name, m->data);
//   }
//
// Shards are untrusted input. Errors are DataLoss, with a message that names
// the shard, the offset of the header or member and, once its header is read,
// the member: a bad header checksum, a malformed number or pax record, a
// truncated header or member, a compressed or non-tar file, or a member or
// name over TarReaderOptions' limits. OpenFile gives NotFound /
// PermissionDenied when the file cannot be opened. An empty input, and an
// archive that ends at a block boundary without the two zero blocks, read as
// archives (as Python's tarfile reads them).
//
// A TarReader is used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_
#define TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct archive;

namespace tessera::trainer::data {

struct TarReaderOptions {
  // Largest member data accepted (a lying size field must not allocate more).
  int64_t max_member_bytes = int64_t{256} << 20;
  // Longest member name accepted (GNU long names and pax paths).
  int64_t max_name_bytes = 4096;
};

struct TarMember {
  std::string name;           // the path inside the archive
  std::string data;           // empty when read with read_data = false
  int64_t size = 0;           // of the data
  int64_t header_offset = 0;  // of the member's (first) header, for messages
  int64_t data_offset = 0;    // of its data: pread(data_offset, size) reads it
};

class TarReader {
 public:
  static absl::StatusOr<std::unique_ptr<TarReader>> OpenFile(
      const std::string& path, const TarReaderOptions& options = {});
  // Reads an archive held in memory (tests, fuzzing); messages call it
  // "in-memory archive".
  static std::unique_ptr<TarReader> FromBuffer(std::string bytes,
                                               const TarReaderOptions& options = {});
  ~TarReader();

  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // The next regular file, nullopt after the last one. With read_data false the
  // data is skipped (seeked over in a file). After an error the reader is
  // spent: every later call returns the same error.
  absl::StatusOr<std::optional<TarMember>> Next(bool read_data = true);

 private:
  struct FileSource;  // the open shard behind libarchive's callbacks
  struct ArchiveFree {
    void operator()(archive* a) const;
  };

  TarReader(std::string source, const TarReaderOptions& options);

  absl::StatusOr<std::optional<TarMember>> ReadNext(bool read_data);
  absl::Status Consume(TarMember& member, bool read_data);
  absl::Status OpenError() const;
  absl::Status Error(int64_t offset, const std::string& member,
                     const std::string& what) const;

  const TarReaderOptions options_;
  const std::string source_;          // the shard's path, for messages
  std::string buffer_;                // FromBuffer's bytes, read in place
  std::unique_ptr<FileSource> file_;  // OpenFile's file
  // Declared last: freed first, while what it reads from still exists.
  std::unique_ptr<archive, ArchiveFree> archive_;
  absl::Status failed_;
  bool ended_ = false;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_
