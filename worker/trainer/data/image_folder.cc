#include "worker/trainer/data/image_folder.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "worker/trainer/data/image_format.h"

namespace tessera::trainer::data {
namespace {

namespace fs = std::filesystem;

absl::Status ErrnoStatus(int err, const std::string& path) {
  const std::string message = absl::StrCat(path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::DataLossError(message);
}

// The image files under `dir`, as paths relative to it, sorted.
absl::StatusOr<std::vector<std::string>> ListImages(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(
      dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (IsImageFileName(name) && !it->is_directory(ec)) {
      files.push_back(it->path().lexically_relative(dir).string());
    }
  }
  if (ec) return ErrnoStatus(ec.value(), dir.string());
  std::sort(files.begin(), files.end());
  return files;
}

// InvalidArgument naming the classes of one split missing in the other.
absl::Status CompareSplits(const std::string& root, absl::string_view split,
                           const std::vector<std::string>& classes) {
  const absl::string_view other = split == "train" ? "val" : "train";
  std::error_code ec;
  if (!fs::is_directory(fs::path(root) / std::string(other), ec)) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> other_classes =
      ListImageFolderClasses(root, other);
  if (!other_classes.ok()) return other_classes.status();
  std::vector<std::string> only_here;
  std::vector<std::string> only_there;
  std::set_difference(classes.begin(), classes.end(), other_classes->begin(),
                      other_classes->end(), std::back_inserter(only_here));
  std::set_difference(other_classes->begin(), other_classes->end(), classes.begin(),
                      classes.end(), std::back_inserter(only_there));
  if (only_here.empty() && only_there.empty()) return absl::OkStatus();
  std::vector<std::string> parts;
  if (!only_here.empty()) {
    parts.push_back(absl::StrCat("class ", absl::StrJoin(only_here, ", "), " is in ",
                                 split, " but not in ", other));
  }
  if (!only_there.empty()) {
    parts.push_back(absl::StrCat("class ", absl::StrJoin(only_there, ", "), " is in ",
                                 other, " but not in ", split));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("image folder ", root, ": ", absl::StrJoin(parts, "; "),
                   " (every class needs a directory in both splits)"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListImageFolderClasses(const std::string& root,
                                                                absl::string_view split) {
  const fs::path dir = fs::path(root) / std::string(split);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(
        absl::StrCat("dataset directory ", root, " does not exist"));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("image folder split ", dir.string(),
                                            " does not exist (expected ROOT/", split,
                                            "/CLASS/*.jpg)"));
  }
  std::vector<std::string> classes;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name[0] != '.' && it->is_directory(ec)) classes.push_back(name);
  }
  if (ec) return ErrnoStatus(ec.value(), dir.string());
  if (classes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("image folder split ", dir.string(), " has no class directories"));
  }
  std::sort(classes.begin(), classes.end());
  return classes;
}

ImageFolder::ImageFolder(std::string split_dir, std::vector<std::string> classes,
                         std::vector<File> files, const ImageFolderOptions& options)
    : split_dir_(std::move(split_dir)),
      classes_(std::move(classes)),
      files_(std::move(files)),
      options_(options) {}

absl::StatusOr<std::unique_ptr<ImageFolder>> ImageFolder::Open(
    const std::string& root, absl::string_view split, const ImageFolderOptions& options) {
  absl::StatusOr<std::vector<std::string>> classes = ListImageFolderClasses(root, split);
  if (!classes.ok()) return classes.status();
  if (absl::Status s = CompareSplits(root, split, *classes); !s.ok()) return s;
  const fs::path dir = fs::path(root) / std::string(split);
  std::vector<File> files;
  for (size_t label = 0; label < classes->size(); ++label) {
    const fs::path class_dir = dir / (*classes)[label];
    absl::StatusOr<std::vector<std::string>> images = ListImages(class_dir);
    if (!images.ok()) return images.status();
    if (images->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "class directory ", class_dir.string(), " has no .jpg, .jpeg or .png files"));
    }
    for (std::string& image : *images) {
      files.push_back(File{std::move(image), static_cast<int32_t>(label)});
    }
  }
  return std::unique_ptr<ImageFolder>(
      new ImageFolder(dir.string(), *std::move(classes), std::move(files), options));
}

std::string ImageFolder::name(int64_t index) const {
  const File& f = files_[index];
  return absl::StrCat(split_dir_, "/", classes_[f.label], "/", f.relative);
}

absl::StatusOr<EncodedSample> ImageFolder::Read(int64_t index) const {
  EncodedSample sample;
  sample.name = name(index);
  sample.label = files_[index].label;
  absl::StatusOr<std::string> bytes =
      ReadFile(sample.name, static_cast<size_t>(options_.max_file_bytes));
  // A file over the limit is an unreadable sample, as a corrupt one is.
  if (absl::IsInvalidArgument(bytes.status())) {
    return absl::DataLossError(bytes.status().message());
  }
  if (!bytes.ok()) return bytes.status();
  sample.bytes = *std::move(bytes);
  return sample;
}

}  // namespace tessera::trainer::data
