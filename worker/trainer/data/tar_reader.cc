#include "worker/trainer/data/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer::data {
namespace {

constexpr int64_t kBlock = 512;
// Members are read whole, so a large read saves system calls.
constexpr size_t kReadChunk = size_t{1} << 18;
// Longest part of a member's name that a message quotes.
constexpr size_t kMaxNameShown = 200;
// The archive_errno of libarchive's warning that a name is not text in the
// locale's charset: its ARCHIVE_ERRNO_FILE_FORMAT, which archive.h leaves to
// the platform (EFTYPE where there is one, else EILSEQ).
#ifdef EFTYPE
constexpr int kNameNotConverted = EFTYPE;
#else
constexpr int kNameNotConverted = EILSEQ;
#endif

int64_t Padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

std::string ArchiveMessage(archive* a) {
  const char* message = archive_error_string(a);
  return message != nullptr ? message : "libarchive gave no reason";
}

}  // namespace

// The shard's file descriptor, read and skipped through libarchive's client
// callbacks. A skip never goes past the size the file had when opened, so
// libarchive reads what is left and reports a truncated member (a seek past
// the end would succeed and hide it).
struct TarReader::FileSource {
  ~FileSource() {
    if (fd >= 0) ::close(fd);
  }

  static la_ssize_t Read(archive* a, void* self, const void** out) {
    auto* f = static_cast<FileSource*>(self);
    for (;;) {
      const ssize_t got = ::read(f->fd, f->buffer.data(), f->buffer.size());
      if (got >= 0) {
        f->position += got;
        *out = f->buffer.data();
        return got;
      }
      if (errno != EINTR) {
        archive_set_error(a, errno, "read: %s", std::strerror(errno));
        return -1;
      }
    }
  }

  static la_int64_t Skip(archive* /*a*/, void* self, la_int64_t request) {
    auto* f = static_cast<FileSource*>(self);
    const int64_t n =
        std::min<int64_t>(request, std::max<int64_t>(f->size - f->position, 0));
    // Skipping nothing makes libarchive read instead.
    if (n <= 0 || ::lseek(f->fd, static_cast<off_t>(n), SEEK_CUR) < 0) return 0;
    f->position += n;
    return n;
  }

  int fd = -1;
  int64_t size = 0;  // when opened
  int64_t position = 0;
  std::string buffer = std::string(kReadChunk, '\0');
};

void TarReader::ArchiveFree::operator()(archive* a) const { archive_read_free(a); }

TarReader::TarReader(std::string source, const TarReaderOptions& options)
    : options_(options), source_(std::move(source)), archive_(archive_read_new()) {
  if (archive_ == nullptr) {
    failed_ = absl::ResourceExhaustedError(
        absl::StrCat(source_, ": cannot allocate a libarchive reader"));
    return;
  }
  // Uncompressed tar only (no filters): data_offset must be a file offset.
  archive_read_support_format_tar(archive_.get());
  archive_read_support_format_empty(archive_.get());
}

TarReader::~TarReader() = default;

absl::StatusOr<std::unique_ptr<TarReader>> TarReader::OpenFile(
    const std::string& path, const TarReaderOptions& options) {
  auto file = std::make_unique<FileSource>();
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (file->fd < 0 || ::fstat(file->fd, &st) != 0) {
    const std::string message = absl::StrCat(path, ": ", std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(message);
    if (errno == EACCES) return absl::PermissionDeniedError(message);
    return absl::DataLossError(message);
  }
  file->size = st.st_size;
  std::unique_ptr<TarReader> reader(new TarReader(path, options));
  if (!reader->failed_.ok()) return reader->failed_;
  reader->file_ = std::move(file);
  if (archive_read_open2(reader->archive_.get(), reader->file_.get(), nullptr,
                         &FileSource::Read, &FileSource::Skip, nullptr) != ARCHIVE_OK) {
    reader->failed_ = reader->OpenError();
  }
  return reader;
}

std::unique_ptr<TarReader> TarReader::FromBuffer(std::string bytes,
                                                 const TarReaderOptions& options) {
  std::unique_ptr<TarReader> reader(new TarReader("in-memory archive", options));
  if (!reader->failed_.ok()) return reader;
  reader->buffer_ = std::move(bytes);
  if (archive_read_open_memory(reader->archive_.get(), reader->buffer_.data(),
                               reader->buffer_.size()) != ARCHIVE_OK) {
    reader->failed_ = reader->OpenError();
  }
  return reader;
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
  archive* a = archive_.get();
  for (;;) {
    // The previous member was consumed to its end: this is the next header.
    const int64_t offset = archive_filter_bytes(a, 0);
    archive_entry* entry = nullptr;
    const int rc = archive_read_next_header(a, &entry);
    if (rc == ARCHIVE_EOF) return std::nullopt;
    if (rc == ARCHIVE_RETRY) {  // libarchive would scan on for a valid header
      return Error(offset, "",
                   absl::StrCat("bad header checksum (", ArchiveMessage(a), ")"));
    }
    // A name that is not text in the locale's charset (a UTF-8 pax path in the
    // C locale) is a warning; libarchive then keeps the name's bytes, which is
    // what a shard's key is. Every other warning is a malformed header.
    if (rc != ARCHIVE_OK &&
        !(rc == ARCHIVE_WARN && archive_errno(a) == kNameNotConverted)) {
      return Error(offset, "", ArchiveMessage(a));
    }
    TarMember member;
    const char* name = archive_entry_pathname(entry);
    member.name = name != nullptr ? name : "";
    member.size = archive_entry_size(entry);
    member.header_offset = offset;
    member.data_offset = archive_filter_bytes(a, 0);
    const bool regular = archive_entry_filetype(entry) == AE_IFREG &&
                         archive_entry_hardlink(entry) == nullptr &&
                         archive_entry_sparse_count(entry) == 0;
    if (!regular) {  // directories, links, devices, sparse files
      if (archive_read_data_skip(a) != ARCHIVE_OK) {
        return Error(offset, member.name,
                     absl::StrCat("cannot be skipped (", ArchiveMessage(a), ")"));
      }
      continue;
    }
    if (member.name.empty() ||
        static_cast<int64_t>(member.name.size()) > options_.max_name_bytes ||
        member.size < 0 || member.size > options_.max_member_bytes) {
      return Error(
          offset, member.name,
          absl::StrCat("has no name, or is over the name or size limit (",
                       member.name.size(), "-byte name, ", member.size, "-byte data)"));
    }
    if (absl::Status s = Consume(member, read_data); !s.ok()) return s;
    return member;
  }
}

// Reads (or skips) the member's data and its padding, and checks that the
// archive holds as many bytes as the header says (a pax or GNU "real size"
// may say otherwise).
absl::Status TarReader::Consume(TarMember& member, bool read_data) {
  archive* a = archive_.get();
  if (read_data) {
    member.data.resize(static_cast<size_t>(member.size));
    int64_t got = 0;
    while (got < member.size) {
      const la_ssize_t n = archive_read_data(a, member.data.data() + got,
                                             static_cast<size_t>(member.size - got));
      if (n < 0) {
        return Error(
            member.header_offset, member.name,
            absl::StrCat("is truncated or unreadable (", ArchiveMessage(a), ")"));
      }
      if (n == 0) break;
      got += n;
    }
    if (got < member.size) {
      return Error(member.header_offset, member.name,
                   absl::StrCat("is truncated (", got, " of ", member.size, " bytes)"));
    }
  }
  if (archive_read_data_skip(a) != ARCHIVE_OK) {
    return Error(member.header_offset, member.name,
                 absl::StrCat("is truncated (", ArchiveMessage(a), ")"));
  }
  const int64_t end = archive_filter_bytes(a, 0);
  if (end != member.data_offset + Padded(member.size)) {
    return Error(
        member.header_offset, member.name,
        absl::StrCat("holds ", end - member.data_offset, " bytes with padding, not the ",
                     Padded(member.size), " its size of ", member.size, " needs"));
  }
  return absl::OkStatus();
}

// libarchive reads the first header when the archive is opened.
absl::Status TarReader::OpenError() const {
  return Error(0, "",
               absl::StrCat("not an uncompressed tar archive, or its first header has a "
                            "bad checksum (",
                            ArchiveMessage(archive_.get()), ")"));
}

absl::Status TarReader::Error(int64_t offset, const std::string& member,
                              const std::string& what) const {
  if (member.empty()) {
    return absl::DataLossError(
        absl::StrCat(source_, ": tar header at offset ", offset, ": ", what));
  }
  return absl::DataLossError(absl::StrCat(
      source_, ": tar member '", absl::CHexEscape(member.substr(0, kMaxNameShown)),
      "' at offset ", offset, " ", what));
}

}  // namespace tessera::trainer::data
