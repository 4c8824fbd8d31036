// A streaming reader of tar archives: POSIX ustar, GNU tar (long names in 'L'
// members, base-256 sizes) and pax (the `path` and `size` records of 'x'
// headers). It yields the archive's regular files in order, with their data;
// directories, links, devices and global pax headers are passed over.
//
//   ASSIGN_OR_RETURN(auto reader, TarReader::OpenFile("train-000000.tar"));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<TarMember> m, reader->Next());
//     if (!m) break;  // end of the archive
//     Use(m->name, m->data);
//   }
//
// Every header's checksum is verified. Errors: DataLoss for a bad checksum, a
// malformed number, a truncated header or member, or a member or name over
// TarReaderOptions' limits; NotFound / PermissionDenied when the file cannot
// be opened. An archive that ends at a block boundary without the two zero
// blocks is accepted (as Python's tarfile does).
//
// A TarReader is used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_
#define TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

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
  class Input;  // where the bytes come from: a file or a buffer

  static absl::StatusOr<std::unique_ptr<TarReader>> OpenFile(
      const std::string& path, const TarReaderOptions& options = {});
  // Reads an archive held in memory (tests, fuzzing).
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
  TarReader(std::unique_ptr<Input> input, const TarReaderOptions& options);

  absl::StatusOr<std::optional<TarMember>> ReadNext(bool read_data);

  const TarReaderOptions options_;
  std::unique_ptr<Input> input_;
  absl::Status failed_;
  bool ended_ = false;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_TAR_READER_H_
