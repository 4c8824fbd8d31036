#include "worker/trainer/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace tessera::trainer {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;
constexpr int kFashionMnistClasses = 10;
// gzread takes an unsigned length; read in slices well below its limit.
constexpr int64_t kReadChunk = int64_t{1} << 24;

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `size` bytes; returns how many were read, or an error status for a
// read or decompression failure.
absl::StatusOr<int64_t> ReadFully(gzFile file, const std::string& path, uint8_t* out,
                                  int64_t size) {
  int64_t total = 0;
  while (total < size) {
    const unsigned chunk = static_cast<unsigned>(std::min(kReadChunk, size - total));
    const int n = gzread(file, out + total, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* message = gzerror(file, &errnum);
      return absl::DataLossError(absl::StrCat(path, ": read failed: ", message));
    }
    if (n == 0) {
      // End of input. A cut gzip stream also ends here, with an error noted.
      int errnum = 0;
      const char* message = gzerror(file, &errnum);
      if (errnum != Z_OK && errnum != Z_STREAM_END) {
        return absl::DataLossError(
            absl::StrCat(path, ": corrupt or truncated gzip data: ", message));
      }
      break;
    }
    total += n;
  }
  return total;
}

std::string ResolveDataFile(const std::string& dir, const std::string& stem) {
  const std::filesystem::path plain = std::filesystem::path(dir) / stem;
  std::error_code ec;
  if (std::filesystem::is_regular_file(plain, ec)) return plain.string();
  const std::filesystem::path gz = std::filesystem::path(dir) / (stem + ".gz");
  if (std::filesystem::is_regular_file(gz, ec)) return gz.string();
  return "";
}

// The file, opened for (possibly gzip-compressed) reading.
absl::StatusOr<GzHandle> OpenIdxFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  gzbuffer(file.get(), 1 << 17);
  return file;
}

// Reads the magic number: two zero bytes, the element type (unsigned byte
// only) and the number of dimensions, which must be `expected_rank`.
absl::Status ReadMagic(gzFile file, const std::string& path, int expected_rank) {
  uint8_t magic[4];
  ASSIGN_OR_RETURN(const int64_t got, ReadFully(file, path, magic, sizeof(magic)));
  if (got < static_cast<int64_t>(sizeof(magic))) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated header (", got, " bytes, expected at least 4)"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::DataLossError(
        absl::StrFormat("%s: bad magic number 0x%02x%02x%02x%02x (not an IDX file)", path,
                        magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != kUnsignedByteType) {
    return absl::DataLossError(absl::StrFormat(
        "%s: unsupported element type 0x%02x (only unsigned byte 0x08)", path, magic[2]));
  }
  if (magic[3] != expected_rank) {
    return absl::DataLossError(
        absl::StrCat(path, ": has ", magic[3], " dimensions, expected ", expected_rank));
  }
  return absl::OkStatus();
}

// Reads the `rank` big-endian dimensions that follow the magic number, each
// and their product (the payload's bytes) within the limits of `options`.
absl::StatusOr<std::vector<int64_t>> ReadDimensions(gzFile file, const std::string& path,
                                                    int rank,
                                                    const IdxReadOptions& options) {
  std::vector<uint8_t> header(4 * static_cast<size_t>(rank));
  ASSIGN_OR_RETURN(const int64_t got, ReadFully(file, path, header.data(),
                                                static_cast<int64_t>(header.size())));
  if (got < static_cast<int64_t>(header.size())) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated header (dimension list cut at ", 4 + got, " bytes)"));
  }
  std::vector<int64_t> dims;
  int64_t payload = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* b = &header[4 * static_cast<size_t>(i)];
    const int64_t dim = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) |
                        (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (dim > options.max_dimension) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", i, " is ", dim,
                                              ", above the limit of ",
                                              options.max_dimension));
    }
    dims.push_back(dim);
    // Both factors are at most 2^28 and payload stays below the byte limit, so
    // this product cannot overflow before the check.
    payload *= dim;
    if (payload > options.max_payload_bytes) {
      return absl::DataLossError(absl::StrCat(path, ": header promises more than ",
                                              options.max_payload_bytes,
                                              " bytes of data"));
    }
  }
  return dims;
}

// Reads exactly `payload` bytes of data, which must end the file.
absl::StatusOr<std::vector<uint8_t>> ReadPayload(gzFile file, const std::string& path,
                                                 int64_t payload) {
  // The buffer grows as data arrives, so a header that promises more than the
  // file holds costs no more memory than the file's real contents.
  constexpr int64_t kChunkBytes = int64_t{4} << 20;
  std::vector<uint8_t> data;
  int64_t have = 0;
  int64_t got = 0;
  while (have < payload) {
    const int64_t want = std::min(kChunkBytes, payload - have);
    data.resize(static_cast<size_t>(have + want));
    ASSIGN_OR_RETURN(got, ReadFully(file, path, data.data() + have, want));
    have += got;
    if (got < want) break;
  }
  if (have < payload) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: header promises ",
                                            payload, " bytes of data, file holds ",
                                            have));
  }
  uint8_t extra;
  ASSIGN_OR_RETURN(got, ReadFully(file, path, &extra, 1));
  if (got != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": size mismatch: trailing bytes after the ", payload,
                     " bytes of data the header promises"));
  }
  return data;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank,
                                     const IdxReadOptions& options) {
  ASSIGN_OR_RETURN(const GzHandle file, OpenIdxFile(path));
  RETURN_IF_ERROR(ReadMagic(file.get(), path, expected_rank));
  IdxArray array;
  ASSIGN_OR_RETURN(array.dims, ReadDimensions(file.get(), path, expected_rank, options));
  int64_t payload = 1;
  for (const int64_t dim : array.dims) payload *= dim;
  ASSIGN_OR_RETURN(array.data, ReadPayload(file.get(), path, payload));
  return array;
}

absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, Split split,
                                              int64_t limit,
                                              const IdxReadOptions& options) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string image_stem = prefix + "-images-idx3-ubyte";
  const std::string label_stem = prefix + "-labels-idx1-ubyte";
  const std::string image_path = ResolveDataFile(dir, image_stem);
  const std::string label_path = ResolveDataFile(dir, label_stem);
  for (const auto& [path, stem] :
       {std::pair{image_path, image_stem}, std::pair{label_path, label_stem}}) {
    if (path.empty()) {
      return absl::NotFoundError(absl::StrCat("Fashion-MNIST: neither ", stem, " nor ",
                                              stem, ".gz exists in ", dir));
    }
  }
  ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(image_path, 3, options));
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(label_path, 1, options));
  if (images.dims[0] != labels.dims[0]) {
    return absl::DataLossError(absl::StrCat(image_path, " holds ", images.dims[0],
                                            " images but ", label_path, " holds ",
                                            labels.dims[0], " labels"));
  }
  if (images.dims[0] == 0 || images.dims[1] == 0 || images.dims[2] == 0) {
    return absl::DataLossError(absl::StrCat(image_path, ": holds no pixels"));
  }

  const int64_t count = limit > 0 ? std::min(limit, images.dims[0]) : images.dims[0];
  ImageDataset dataset;
  dataset.channels = 1;
  dataset.height = static_cast<int>(images.dims[1]);
  dataset.width = static_cast<int>(images.dims[2]);
  dataset.num_classes = kFashionMnistClasses;
  images.data.resize(static_cast<size_t>(count * dataset.image_bytes()));
  images.data.shrink_to_fit();
  dataset.pixels = std::move(images.data);
  dataset.labels.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = labels.data[static_cast<size_t>(i)];
    if (label >= kFashionMnistClasses) {
      return absl::DataLossError(absl::StrCat(label_path, ": label ", label, " at index ",
                                              i, " is not in [0, ", kFashionMnistClasses,
                                              ")"));
    }
    dataset.labels.push_back(label);
  }
  RETURN_IF_ERROR(ValidateImageDataset(dataset));
  return dataset;
}

}  // namespace tessera::trainer
