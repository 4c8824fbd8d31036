#include "worker/trainer/data/tar_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tessera::trainer::data {

constexpr size_t kBlock = 512;

class TarReader::Input {
 public:
  virtual ~Input() = default;
  // Reads up to `n` bytes; fewer only at the end of the input.
  virtual absl::StatusOr<size_t> Read(char* out, size_t n) = 0;
  // Skips `n` bytes; false when the input ends first.
  virtual absl::StatusOr<bool> Skip(int64_t n) = 0;
  int64_t offset() const { return offset_; }

 protected:
  int64_t offset_ = 0;
};

namespace {

class FileInput : public TarReader::Input {
 public:
  FileInput(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {
    // Members are read whole, so a large buffer saves system calls.
    std::setvbuf(file_, nullptr, _IOFBF, size_t{1} << 18);
  }
  ~FileInput() override { std::fclose(file_); }

  absl::StatusOr<size_t> Read(char* out, size_t n) override {
    const size_t got = std::fread(out, 1, n, file_);
    if (got < n && std::ferror(file_)) {
      return absl::DataLossError(
          absl::StrCat("reading ", path_, ": ", std::strerror(errno)));
    }
    offset_ += static_cast<int64_t>(got);
    return got;
  }

  absl::StatusOr<bool> Skip(int64_t n) override {
    if (::fseeko(file_, static_cast<off_t>(n), SEEK_CUR) != 0) {
      return absl::DataLossError(
          absl::StrCat("seeking in ", path_, ": ", std::strerror(errno)));
    }
    offset_ += n;
    // A seek past the end succeeds; the next read then finds nothing.
    return true;
  }

 private:
  std::FILE* const file_;
  const std::string path_;
};

class BufferInput : public TarReader::Input {
 public:
  explicit BufferInput(std::string bytes) : bytes_(std::move(bytes)) {}

  absl::StatusOr<size_t> Read(char* out, size_t n) override {
    const size_t pos = static_cast<size_t>(offset_);
    const size_t got = std::min(n, bytes_.size() - std::min(pos, bytes_.size()));
    if (got > 0) std::memcpy(out, bytes_.data() + pos, got);
    offset_ += static_cast<int64_t>(got);
    return got;
  }

  absl::StatusOr<bool> Skip(int64_t n) override {
    const auto left = static_cast<int64_t>(bytes_.size()) - offset_;
    offset_ += std::min(n, std::max<int64_t>(left, 0));
    return n <= left;
  }

 private:
  const std::string bytes_;
};

int64_t Padded(int64_t size) {
  return (size + static_cast<int64_t>(kBlock) - 1) / kBlock * kBlock;
}

// A numeric header field: octal digits (leading spaces allowed, ended by a
// space or NUL), or GNU base-256 when the first byte's high bit is set.
absl::StatusOr<int64_t> ParseNumber(const char* field, size_t len,
                                    absl::string_view what) {
  const auto* u = reinterpret_cast<const unsigned char*>(field);
  if (u[0] & 0x80) {
    if (u[0] != 0x80)
      return absl::DataLossError(absl::StrCat("tar ", what, ": negative or too large"));
    uint64_t v = 0;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 55) return absl::DataLossError(absl::StrCat("tar ", what, ": too large"));
      v = (v << 8) | u[i];
    }
    return static_cast<int64_t>(v);
  }
  size_t i = 0;
  while (i < len && field[i] == ' ') ++i;
  int64_t v = 0;
  for (; i < len && field[i] != ' ' && field[i] != '\0'; ++i) {
    if (field[i] < '0' || field[i] > '7' || v > (INT64_MAX >> 3)) {
      return absl::DataLossError(absl::StrCat("tar ", what, ": not an octal number"));
    }
    v = v * 8 + (field[i] - '0');
  }
  return v;
}

bool ChecksumMatches(const char* header, int64_t stored) {
  int64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    unsigned_sum += in_field ? ' ' : static_cast<unsigned char>(header[i]);
    signed_sum += in_field ? ' ' : static_cast<signed char>(header[i]);
  }
  return stored == unsigned_sum || stored == signed_sum;
}

std::string CString(const char* field, size_t len) {
  return std::string(field, strnlen(field, len));
}

// The `path` and `size` records of a pax extended header ("LEN key=value\n").
absl::Status ParsePax(absl::string_view data, std::optional<std::string>& path,
                      std::optional<int64_t>& size) {
  while (!data.empty()) {
    const size_t space = data.find(' ');
    size_t len = 0;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtoi(data.substr(0, space), &len) || len <= space + 1 ||
        len > data.size() || data[len - 1] != '\n') {
      return absl::DataLossError("tar pax header: malformed record");
    }
    const absl::string_view record = data.substr(space + 1, len - space - 2);
    data.remove_prefix(len);
    const size_t eq = record.find('=');
    if (eq == absl::string_view::npos)
      return absl::DataLossError("tar pax header: no '='");
    const absl::string_view key = record.substr(0, eq);
    const absl::string_view value = record.substr(eq + 1);
    int64_t n = 0;
    if (key == "path") path = std::string(value);
    if (key == "size") {
      if (!absl::SimpleAtoi(value, &n) || n < 0) {
        return absl::DataLossError("tar pax header: bad size");
      }
      size = n;
    }
  }
  return absl::OkStatus();
}

// Reads a member's `size` bytes of data and the padding after them.
absl::StatusOr<std::string> ReadData(TarReader::Input& in, int64_t size, int64_t offset) {
  std::string data(static_cast<size_t>(size), '\0');
  absl::StatusOr<size_t> got = in.Read(data.data(), data.size());
  if (!got.ok()) return got.status();
  if (*got < data.size()) {
    return absl::DataLossError(absl::StrCat("tar member at offset ", offset,
                                            " is truncated (", *got, " of ", size,
                                            " bytes)"));
  }
  absl::StatusOr<bool> skipped = in.Skip(Padded(size) - size);
  if (!skipped.ok()) return skipped.status();
  return data;
}

absl::Status SkipData(TarReader::Input& in, int64_t size, int64_t offset) {
  absl::StatusOr<bool> skipped = in.Skip(Padded(size));
  if (!skipped.ok()) return skipped.status();
  if (!*skipped) {
    return absl::DataLossError(
        absl::StrCat("tar member at offset ", offset, " is truncated"));
  }
  return absl::OkStatus();
}

// One 512-byte header: false at the end of the archive (end of input at a
// block boundary, or a zero block).
absl::StatusOr<bool> ReadHeader(TarReader::Input& in, char* header) {
  const int64_t offset = in.offset();
  absl::StatusOr<size_t> got = in.Read(header, kBlock);
  if (!got.ok()) return got.status();
  if (*got == 0) return false;
  if (*got < kBlock) {
    return absl::DataLossError(
        absl::StrCat("tar header at offset ", offset, " is truncated"));
  }
  bool zero = true;
  for (size_t i = 0; i < kBlock && zero; ++i) zero = header[i] == '\0';
  if (zero) return false;
  absl::StatusOr<int64_t> checksum = ParseNumber(header + 148, 8, "checksum");
  if (!checksum.ok() || !ChecksumMatches(header, *checksum)) {
    return absl::DataLossError(
        absl::StrCat("tar header at offset ", offset, " has a bad checksum"));
  }
  return true;
}

std::string UstarName(const char* header) {
  std::string name = CString(header, 100);
  if (std::memcmp(header + 257, "ustar\0", 6) == 0 && header[345] != '\0') {
    name = absl::StrCat(CString(header + 345, 155), "/", name);
  }
  return name;
}

bool IsRegularFile(char type) { return type == '0' || type == '\0' || type == '7'; }

}  // namespace

TarReader::TarReader(std::unique_ptr<Input> input, const TarReaderOptions& options)
    : options_(options), input_(std::move(input)) {}

TarReader::~TarReader() = default;

absl::StatusOr<std::unique_ptr<TarReader>> TarReader::OpenFile(
    const std::string& path, const TarReaderOptions& options) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const std::string message = absl::StrCat(path, ": ", std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(message);
    if (errno == EACCES) return absl::PermissionDeniedError(message);
    return absl::DataLossError(message);
  }
  return std::unique_ptr<TarReader>(
      new TarReader(std::make_unique<FileInput>(file, path), options));
}

std::unique_ptr<TarReader> TarReader::FromBuffer(std::string bytes,
                                                 const TarReaderOptions& options) {
  return std::unique_ptr<TarReader>(
      new TarReader(std::make_unique<BufferInput>(std::move(bytes)), options));
}

absl::StatusOr<std::optional<TarMember>> TarReader::Next(bool read_data) {
  if (!failed_.ok()) return failed_;
  if (ended_) return std::nullopt;
  absl::StatusOr<std::optional<TarMember>> member = ReadNext(read_data);
  if (!member.ok()) {
    failed_ = member.status();
  } else if (!member->has_value()) {
    ended_ = true;
  }
  return member;
}

absl::StatusOr<std::optional<TarMember>> TarReader::ReadNext(bool read_data) {
  std::optional<std::string> long_name;  // from a GNU 'L' or pax 'x' member
  std::optional<int64_t> long_size;      // from a pax 'x' member
  const int64_t first_offset = input_->offset();
  char header[kBlock];
  for (;;) {
    const int64_t offset = input_->offset();
    absl::StatusOr<bool> more = ReadHeader(*input_, header);
    if (!more.ok()) return more.status();
    if (!*more) {
      if (long_name || long_size) {
        return absl::DataLossError("tar archive ends after an extended header");
      }
      return std::nullopt;
    }
    absl::StatusOr<int64_t> size = ParseNumber(header + 124, 12, "size");
    if (!size.ok()) return size.status();
    const char type = header[156];
    if (type == 'L' || type == 'x') {
      if (*size > options_.max_name_bytes * 4) {
        return absl::DataLossError(
            absl::StrCat("tar extended header at offset ", offset, " is too long"));
      }
      absl::StatusOr<std::string> data = ReadData(*input_, *size, offset);
      if (!data.ok()) return data.status();
      if (type == 'L') {
        long_name = CString(data->data(), data->size());
      } else if (absl::Status s = ParsePax(*data, long_name, long_size); !s.ok()) {
        return s;
      }
      continue;
    }
    if (!IsRegularFile(type)) {  // directories, links, devices, global pax headers
      if (absl::Status s = SkipData(*input_, *size, offset); !s.ok()) return s;
      long_name.reset();
      long_size.reset();
      continue;
    }
    TarMember member;
    member.name = long_name ? *long_name : UstarName(header);
    member.size = long_size ? *long_size : *size;
    member.header_offset = first_offset;
    member.data_offset = input_->offset();
    if (member.name.empty() ||
        static_cast<int64_t>(member.name.size()) > options_.max_name_bytes ||
        member.size > options_.max_member_bytes) {
      return absl::DataLossError(
          absl::StrCat("tar member at offset ", offset,
                       " has no name, or is over the name or size limit"));
    }
    if (read_data) {
      absl::StatusOr<std::string> data = ReadData(*input_, member.size, offset);
      if (!data.ok()) return data.status();
      member.data = *std::move(data);
    } else if (absl::Status s = SkipData(*input_, member.size, offset); !s.ok()) {
      return s;
    }
    return member;
  }
}

}  // namespace tessera::trainer::data
