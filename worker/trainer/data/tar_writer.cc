#include "worker/trainer/data/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::trainer::data {
namespace {

constexpr int kRecord = 10240;  // GNU tar's default: 20 blocks of 512 bytes

struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

}  // namespace

void TarWriter::ArchiveFree::operator()(archive* a) const { archive_write_free(a); }

TarWriter::TarWriter(std::string path)
    : path_(std::move(path)), archive_(archive_write_new()) {}

TarWriter::~TarWriter() {
  // Marks the archive failed, so that freeing it writes no end blocks.
  if (archive_ != nullptr && !finished_) archive_write_fail(archive_.get());
}

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Create(const std::string& path) {
  std::unique_ptr<TarWriter> writer(new TarWriter(path));
  archive* a = writer->archive_.get();
  if (a == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("creating ", path, ": cannot allocate a libarchive writer"));
  }
  // Zero: the last record is padded to its full size, as on a tape.
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(a, kRecord) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(a, 0) != ARCHIVE_OK ||
      archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    return writer->Failure("creating");
  }
  return writer;
}

absl::Status TarWriter::Add(absl::string_view name, absl::string_view data,
                            int64_t mtime) {
  if (finished_) return absl::FailedPreconditionError("tar writer is finished");
  if (name.empty()) return absl::InvalidArgumentError("tar member without a name");
  if (name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("tar member name with a NUL byte");
  }
  archive* a = archive_.get();
  std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new2(a));
  if (entry == nullptr) return Failure("adding a member to");
  archive_entry_copy_pathname(entry.get(), std::string(name).c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(data.size()));
  archive_entry_set_mtime(entry.get(), static_cast<time_t>(mtime), 0);
  // A warning is a name that is not text in the locale's charset (any
  // non-ASCII name in the C locale): the pax header then holds the name's
  // bytes, marked hdrcharset=BINARY, which is what a shard's key is.
  if (archive_write_header(a, entry.get()) < ARCHIVE_WARN) return Failure("writing");
  size_t done = 0;
  while (done < data.size()) {
    const la_ssize_t n = archive_write_data(a, data.data() + done, data.size() - done);
    if (n <= 0) return Failure("writing");
    done += static_cast<size_t>(n);
  }
  if (archive_write_finish_entry(a) != ARCHIVE_OK) return Failure("writing");
  return absl::OkStatus();
}

absl::Status TarWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("tar writer is finished");
  finished_ = true;
  archive* a = archive_.get();
  const int rc = archive_write_close(a);
  final_bytes_ = archive_filter_bytes(a, -1);
  if (rc != ARCHIVE_OK) return Failure("closing");
  return absl::OkStatus();
}

int64_t TarWriter::bytes_written() const {
  if (finished_) return final_bytes_;
  return archive_filter_bytes(archive_.get(), 0);
}

absl::Status TarWriter::Failure(absl::string_view doing) const {
  archive* a = archive_.get();
  const char* message = archive_error_string(a);
  const int err = archive_errno(a);
  return absl::InternalError(absl::StrCat(
      doing, " ", path_, ": ", message != nullptr ? message : "libarchive failed",
      err > 0 ? absl::StrCat(" (", std::strerror(err), ")") : ""));
}

}  // namespace tessera::trainer::data
