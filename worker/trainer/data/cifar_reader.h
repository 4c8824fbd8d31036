// Loaders for the binary versions of CIFAR-10 and CIFAR-100 (Krizhevsky, 2009),
// as distributed in cifar-10-binary.tar.gz and cifar-100-binary.tar.gz.
//
// CIFAR-10: data_batch_1.bin .. data_batch_5.bin (train, 50,000 images) and
// test_batch.bin (10,000), each a sequence of 3073-byte records: one label byte
// in [0, 10), then 3072 pixel bytes (32x32 red plane, then green, then blue).
// CIFAR-100: train.bin (50,000) and test.bin (10,000), 3074-byte records: the
// coarse label in [0, 20), the fine label in [0, 100), then the same 3072 pixel
// bytes. The loaders keep the fine label (100 classes).
//
// Files are looked up in the given directory and then in the subdirectory the
// archive extracts to (cifar-10-batches-bin/, cifar-100-binary/). Every file is
// untrusted: a missing file is NotFound naming the file and both places searched;
// a size that is not a whole number of records (a truncated or foreign file) or a
// label out of range is DataLoss naming the file. Free functions without shared
// state: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_CIFAR_READER_H_
#define TESSERA_WORKER_TRAINER_DATA_CIFAR_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

enum class CifarVariant { kCifar10, kCifar100 };

// The layout of one variant's files.
struct CifarLayout {
  std::string display_name;  // "CIFAR-10" | "CIFAR-100"
  std::string subdir;        // what the archive extracts to
  std::vector<std::string> train_files;
  std::vector<std::string> test_files;
  int label_bytes = 1;     // label bytes before the pixels of each record
  int label_index = 0;     // which of them is the class label
  int num_classes = 10;    // range of the class label
  int coarse_classes = 0;  // range of the other label byte (CIFAR-100); 0: none
  static constexpr int kChannels = 3;
  static constexpr int kSide = 32;
  static constexpr int64_t kPixelBytes = int64_t{kChannels} * kSide * kSide;

  int64_t record_bytes() const { return label_bytes + kPixelBytes; }
};

const CifarLayout& GetCifarLayout(CifarVariant variant);

struct CifarReadOptions {
  // Largest file accepted (the real files are 30.7 MB and 153.7 MB); a larger
  // one is rejected before anything is allocated.
  int64_t max_file_bytes = int64_t{1} << 30;
};

// Loads the train or test split of `variant` from `dir` (or its archive
// subdirectory). `limit` > 0 keeps only the first `limit` images, in file order,
// and reads no further records.
absl::StatusOr<ImageDataset> LoadCifar(CifarVariant variant, const std::string& dir,
                                       Split split, int64_t limit,
                                       const CifarReadOptions& options = {});

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_CIFAR_READER_H_
