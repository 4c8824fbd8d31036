// An image folder as torchvision's ImageFolder and timm read it:
//
//   ROOT/train/CLASS/**/*.{jpg,jpeg,png}   ROOT/val/CLASS/**/*.{jpg,jpeg,png}
//
// Classes are the sorted (byte order) names of the split's directories, and a
// class's label is its index in that order, so the mapping never depends on
// the files found. Images are the files under a class directory, recursively,
// whose extension is .jpg, .jpeg or .png in any case; names starting with '.'
// (macOS "._x.jpg" resource forks) are ignored. Samples are ordered by class,
// then by path relative to the class directory (byte order): deterministic on
// every machine.
//
//   ASSIGN_OR_RETURN(auto train, ImageFolder::Open("/data/pets", "train"));
//   ASSIGN_OR_RETURN(EncodedSample s, train->Read(i));
//
// Open fails before any sample is read: NotFound naming a missing ROOT or
// split directory; InvalidArgument naming a split without class directories, a
// class directory without images, or a class present in this split and not in
// the other one (when the other split's directory exists).
//
// Immutable after Open: thread-safe (see encoded_image_source.h).
#ifndef TESSERA_WORKER_TRAINER_DATA_IMAGE_FOLDER_H_
#define TESSERA_WORKER_TRAINER_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/data/encoded_image_source.h"

namespace tessera::trainer::data {

struct ImageFolderOptions {
  // Files larger than this are unreadable samples (DataLoss), not allocated.
  int64_t max_file_bytes = int64_t{64} << 20;
};

class ImageFolder : public EncodedImageSource {
 public:
  // `split` is "train" or "val" (any directory name under root works).
  static absl::StatusOr<std::unique_ptr<ImageFolder>> Open(
      const std::string& root, absl::string_view split,
      const ImageFolderOptions& options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  const std::vector<std::string>& class_names() const override { return classes_; }
  int64_t label(int64_t index) const override { return files_[index].label; }
  std::string name(int64_t index) const override;
  absl::StatusOr<EncodedSample> Read(int64_t index) const override;

  const std::string& split_dir() const { return split_dir_; }

 private:
  struct File {
    std::string relative;  // to the class directory
    int32_t label = 0;
  };

  ImageFolder(std::string split_dir, std::vector<std::string> classes,
              std::vector<File> files, const ImageFolderOptions& options);

  const std::string split_dir_;
  const std::vector<std::string> classes_;
  const std::vector<File> files_;
  const ImageFolderOptions options_;
};

// The sorted class directory names of ROOT/split. NotFound when the directory
// is missing, InvalidArgument when it has no subdirectories.
absl::StatusOr<std::vector<std::string>> ListImageFolderClasses(const std::string& root,
                                                                absl::string_view split);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_IMAGE_FOLDER_H_
