#include "worker/trainer/data/shard_packer.h"

#include <filesystem>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/image_format.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/tar_writer.h"

namespace tessera::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kProgressEvery = 500;

// Writes one split's shards; appends them to `files`.
absl::Status PackSplit(const PackOptions& options, const std::string& split,
                       const ImageFolder& folder, std::vector<ShardFile>& files,
                       PackReport& report) {
  std::unique_ptr<TarWriter> tar;
  int64_t packed = 0;
  auto close_shard = [&]() -> absl::Status {
    if (tar == nullptr) return absl::OkStatus();
    absl::Status s = tar->Finish();
    tar.reset();
    return s;
  };
  for (int64_t i = 0; i < folder.size(); ++i) {
    if (options.progress && i % kProgressEvery == 0)
      options.progress(split, i, folder.size());
    absl::StatusOr<EncodedSample> sample = folder.Read(i);
    const ImageFormat format =
        sample.ok() ? SniffImageFormat(sample->bytes) : ImageFormat::kUnknown;
    if (format == ImageFormat::kUnknown) {
      report.left_out.push_back(
          sample.ok() ? absl::StrCat(folder.name(i), ": not a JPEG or PNG image")
                      : std::string(sample.status().message()));
      continue;
    }
    if (tar == nullptr) {
      const std::string file = absl::StrFormat("%s-%06d.tar", split, files.size());
      absl::StatusOr<std::unique_ptr<TarWriter>> created =
          TarWriter::Create((fs::path(options.out) / file).string());
      if (!created.ok()) return created.status();
      tar = *std::move(created);
      files.push_back(ShardFile{file, 0});
      ++report.shards;
    }
    const std::string key = absl::StrFormat("%08d", i);
    absl::Status s =
        tar->Add(absl::StrCat(key, ".", ImageFormatExtension(format)), sample->bytes);
    if (s.ok()) s = tar->Add(absl::StrCat(key, ".cls"), absl::StrCat(sample->label));
    if (!s.ok()) return s;
    ++packed;
    if (++files.back().samples == options.shard_size) {
      if (absl::Status closed = close_shard(); !closed.ok()) return closed;
    }
  }
  report.samples[split] = packed;
  if (options.progress) options.progress(split, folder.size(), folder.size());
  return close_shard();
}

}  // namespace

absl::StatusOr<PackReport> PackImageFolder(const PackOptions& options) {
  if (options.shard_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard size ", options.shard_size, " is not positive"));
  }
  // Open every split first, so a bad folder fails before anything is written.
  std::vector<std::pair<std::string, std::unique_ptr<ImageFolder>>> folders;
  for (const std::string& split : options.splits) {
    std::error_code ec;
    if (split != "train" && !fs::is_directory(fs::path(options.root) / split, ec))
      continue;
    absl::StatusOr<std::unique_ptr<ImageFolder>> folder =
        ImageFolder::Open(options.root, split);
    if (!folder.ok()) return folder.status();
    folders.emplace_back(split, *std::move(folder));
  }
  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("creating ", options.out, ": ", ec.message()));
  }
  PackReport report;
  ShardIndex index;
  report.classes = folders.front().second->class_names();
  index.classes = report.classes;
  for (const auto& [split, folder] : folders) {
    std::vector<ShardFile>& files = index.splits[split];
    if (absl::Status s = PackSplit(options, split, *folder, files, report); !s.ok())
      return s;
  }
  if (absl::Status s = WriteShardIndex(options.out, index); !s.ok()) return s;
  return report;
}

}  // namespace tessera::trainer::data
