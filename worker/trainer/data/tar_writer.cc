#include "worker/trainer/data/tar_writer.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::trainer::data {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kRecord = 10240;  // GNU tar's default: 20 blocks
constexpr size_t kNameField = 100;

// `value` in octal, zero-padded, NUL-terminated, in a field of `len` bytes;
// base-256 (GNU) when it does not fit.
void PutNumber(char* field, size_t len, int64_t value) {
  const std::string octal = absl::StrFormat("%0*o", static_cast<int>(len - 1), value);
  if (octal.size() <= len - 1) {
    std::memcpy(field, octal.data(), octal.size());
    field[len - 1] = '\0';
    return;
  }
  std::memset(field, 0, len);
  field[0] = static_cast<char>(0x80);
  for (size_t i = len - 1; i > 0 && value > 0; --i, value >>= 8) {
    field[i] = static_cast<char>(value & 0xFF);
  }
}

}  // namespace

TarWriter::TarWriter(std::FILE* file, std::string path)
    : file_(file), path_(std::move(path)) {}

TarWriter::~TarWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Create(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("creating ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TarWriter>(new TarWriter(file, path));
}

absl::Status TarWriter::Write(const char* data, size_t size) {
  if (file_ == nullptr) return absl::FailedPreconditionError("tar writer is finished");
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
    return absl::InternalError(
        absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
  }
  written_ += static_cast<int64_t>(size);
  return absl::OkStatus();
}

absl::Status TarWriter::WriteHeader(absl::string_view name, int64_t size, char type,
                                    int64_t mtime) {
  char header[kBlock] = {};
  std::memcpy(header, name.data(), std::min(name.size(), kNameField));
  PutNumber(header + 100, 8, 0644);  // mode
  PutNumber(header + 108, 8, 0);     // uid
  PutNumber(header + 116, 8, 0);     // gid
  PutNumber(header + 124, 12, size);
  PutNumber(header + 136, 12, mtime);
  header[156] = type;
  std::memcpy(header + 257,
              "ustar\0"
              "00",
              8);                     // POSIX magic and version
  std::memset(header + 148, ' ', 8);  // checksum: summed as spaces
  unsigned sum = 0;
  for (const char c : header) sum += static_cast<unsigned char>(c);
  const std::string checksum = absl::StrFormat("%06o", sum);
  std::memcpy(header + 148, checksum.data(), 6);
  header[154] = '\0';
  header[155] = ' ';
  return Write(header, kBlock);
}

absl::Status TarWriter::Add(absl::string_view name, absl::string_view data,
                            int64_t mtime) {
  if (name.empty()) return absl::InvalidArgumentError("tar member without a name");
  const auto size = static_cast<int64_t>(data.size());
  if (name.size() >= kNameField) {
    // GNU long name: the name (NUL-terminated) as the data of an 'L' member.
    const std::string long_name = absl::StrCat(name, std::string(1, '\0'));
    if (absl::Status s = WriteHeader("././@LongLink", long_name.size(), 'L', 0);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Write(long_name.data(), long_name.size()); !s.ok()) return s;
    const std::string pad(kBlock - long_name.size() % kBlock, '\0');
    if (long_name.size() % kBlock != 0) {
      if (absl::Status s = Write(pad.data(), pad.size()); !s.ok()) return s;
    }
  }
  if (absl::Status s = WriteHeader(name, size, '0', mtime); !s.ok()) return s;
  if (absl::Status s = Write(data.data(), data.size()); !s.ok()) return s;
  const size_t tail = data.size() % kBlock;
  if (tail == 0) return absl::OkStatus();
  const std::string pad(kBlock - tail, '\0');
  return Write(pad.data(), pad.size());
}

absl::Status TarWriter::Finish() {
  std::string end(2 * kBlock, '\0');
  const size_t total = static_cast<size_t>(written_) + end.size();
  if (total % kRecord != 0) end.append(kRecord - total % kRecord, '\0');
  if (absl::Status s = Write(end.data(), end.size()); !s.ok()) return s;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("closing ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace tessera::trainer::data
