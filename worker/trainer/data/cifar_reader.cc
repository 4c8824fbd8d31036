#include "worker/trainer/data/cifar_reader.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace tessera::trainer {
namespace {

// Where `name` lives: `dir` itself, else the archive's subdirectory. NotFound
// naming both places when neither holds it.
absl::StatusOr<std::filesystem::path> LocateFile(const CifarLayout& layout,
                                                 const std::string& dir,
                                                 const std::string& name) {
  const std::filesystem::path flat = std::filesystem::path(dir) / name;
  const std::filesystem::path nested = std::filesystem::path(dir) / layout.subdir / name;
  std::error_code ec;
  if (std::filesystem::is_regular_file(flat, ec)) return flat;
  if (std::filesystem::is_regular_file(nested, ec)) return nested;
  return absl::NotFoundError(absl::StrCat(
      layout.display_name, " file ", name, " not found: looked for ", flat.string(),
      " and ", nested.string(), " (extract the binary version of ", layout.display_name,
      " into the data directory)"));
}

// Appends the first `max_records` records of `path` (all if it holds fewer) to
// `dataset`.
absl::Status ReadRecords(const CifarLayout& layout, const std::filesystem::path& path,
                         int64_t max_records, const CifarReadOptions& options,
                         ImageDataset& dataset) {
  const std::string name = path.string();
  std::error_code ec;
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat(name, ": cannot read size: ", ec.message()));
  }
  const int64_t record = layout.record_bytes();
  const auto size = static_cast<int64_t>(file_size);
  if (size > options.max_file_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": ", size, " bytes is more than the ",
                                            options.max_file_bytes, "-byte limit for a ",
                                            layout.display_name, " file"));
  }
  if (size == 0 || size % record != 0) {
    return absl::DataLossError(absl::StrCat(
        name, ": size ", size, " bytes is not a positive multiple of the ", record,
        "-byte ", layout.display_name, " record (truncated, corrupt or not a ",
        layout.display_name, " binary file)"));
  }
  const int64_t records = std::min(size / record, max_records);
  std::vector<uint8_t> bytes(static_cast<size_t>(records * record));
  ASSIGN_OR_RETURN(const RandomAccessFile file, RandomAccessFile::Open(name));
  RETURN_IF_ERROR(file.ReadExactly(0, bytes.size(), bytes.data()));

  const int64_t first = dataset.size();
  dataset.pixels.resize(
      static_cast<size_t>((first + records) * CifarLayout::kPixelBytes));
  dataset.labels.resize(static_cast<size_t>(first + records));
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* in_record = &bytes[static_cast<size_t>(r * record)];
    for (int b = 0; b < layout.label_bytes; ++b) {
      const bool is_class = b == layout.label_index;
      const int range = is_class ? layout.num_classes : layout.coarse_classes;
      if (in_record[b] >= range) {
        return absl::DataLossError(absl::StrCat(
            name, ": record ", r, " (byte offset ", r * record, ") has ",
            is_class ? "label " : "coarse label ", int{in_record[b]}, ", not in [0, ",
            range, ") (corrupt or not a ", layout.display_name, " binary file)"));
      }
    }
    dataset.labels[static_cast<size_t>(first + r)] = in_record[layout.label_index];
    std::copy_n(
        in_record + layout.label_bytes, CifarLayout::kPixelBytes,
        &dataset.pixels[static_cast<size_t>((first + r) * CifarLayout::kPixelBytes)]);
  }
  return absl::OkStatus();
}

}  // namespace

const CifarLayout& GetCifarLayout(CifarVariant variant) {
  static const auto* const kCifar10 = new CifarLayout{
      .display_name = "CIFAR-10",
      .subdir = "cifar-10-batches-bin",
      .train_files = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                      "data_batch_4.bin", "data_batch_5.bin"},
      .test_files = {"test_batch.bin"},
      .label_bytes = 1,
      .label_index = 0,
      .num_classes = 10,
      .coarse_classes = 0,
  };
  static const auto* const kCifar100 = new CifarLayout{
      .display_name = "CIFAR-100",
      .subdir = "cifar-100-binary",
      .train_files = {"train.bin"},
      .test_files = {"test.bin"},
      .label_bytes = 2,
      .label_index = 1,
      .num_classes = 100,
      .coarse_classes = 20,
  };
  return variant == CifarVariant::kCifar10 ? *kCifar10 : *kCifar100;
}

absl::StatusOr<ImageDataset> LoadCifar(CifarVariant variant, const std::string& dir,
                                       Split split, int64_t limit,
                                       const CifarReadOptions& options) {
  const CifarLayout& layout = GetCifarLayout(variant);
  const std::vector<std::string>& files =
      split == Split::kTrain ? layout.train_files : layout.test_files;
  // Every file is located before any is read, so a missing one fails fast.
  std::vector<std::filesystem::path> paths;
  for (const std::string& name : files) {
    ASSIGN_OR_RETURN(std::filesystem::path path, LocateFile(layout, dir, name));
    paths.push_back(std::move(path));
  }

  ImageDataset dataset;
  dataset.channels = CifarLayout::kChannels;
  dataset.height = CifarLayout::kSide;
  dataset.width = CifarLayout::kSide;
  dataset.num_classes = layout.num_classes;
  for (const std::filesystem::path& path : paths) {
    const int64_t wanted =
        limit > 0 ? limit - dataset.size() : std::numeric_limits<int64_t>::max();
    if (wanted <= 0) break;
    RETURN_IF_ERROR(ReadRecords(layout, path, wanted, options, dataset));
  }
  RETURN_IF_ERROR(ValidateImageDataset(dataset));
  return dataset;
}

}  // namespace tessera::trainer
