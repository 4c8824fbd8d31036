// Fuzzes the dataset file readers of the trainer (worker/trainer/data/cifar_reader.h,
// idx_reader.h): CIFAR-10/100 binary batches and IDX files, plain or gzipped,
// as read from disk by LoadCifar, ReadIdxFile and LoadFashionMnist.
//
// The readers take paths, so the input is written to in-memory files
// (memfd_create) that a private directory of symlinks names with the file names
// the loaders look for (test_batch.bin -> /proc/self/fd/N, ...).
//
// Input: byte 0 picks the reader (below), byte 1 the image limit (0: all), and
// the rest is the file. For Fashion-MNIST, bytes 2-3 give the length of the
// images file (big endian), which follows, and the labels file is the rest.
//
// Besides crashes and sanitizer reports, these invariants abort the run:
//   - errors are DataLoss or InvalidArgument (bad content), never another code;
//   - a loaded dataset is consistent (ValidateImageDataset), respects the limit,
//     and holds exactly the labels and pixels of the file's records;
//   - an IDX array has the requested rank, product(dims) bytes, and for a plain
//     (not gzipped) file exactly the bytes after the header.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_check.h"
#include "worker/trainer/data/cifar_reader.h"
#include "worker/trainer/data/idx_reader.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::fuzz {
namespace {

namespace tt = ::tessera::trainer;

enum Mode : uint8_t {
  kCifar10Test = 0,    // one file: test_batch.bin
  kCifar10Train = 1,   // data_batch_1..5.bin, all five the input
  kCifar100Test = 2,   // test.bin
  kCifar100Train = 3,  // train.bin
  kIdxRank1 = 4,       // ReadIdxFile(path, 1)
  kIdxRank3 = 5,       // ReadIdxFile(path, 3)
  kFashionTest = 6,    // t10k-{images-idx3,labels-idx1}-ubyte
  kFashionTrain = 7,   // train-{images-idx3,labels-idx1}-ubyte
  kModes = 8,
};

// Small limits keep a lying header from allocating gigabytes in the fuzzer;
// the checks are the same as with the defaults.
constexpr int64_t kMaxIdxPayload = int64_t{1} << 22;

// Two in-memory files and a directory naming them as every loader expects.
class MemFiles {
 public:
  MemFiles() {
    a_ = memfd_create("tessera-fuzz-a", 0);
    b_ = memfd_create("tessera-fuzz-b", 0);
    Check(a_ >= 0 && b_ >= 0, "memfd_create failed", std::strerror(errno));
    char dir_template[] = "/tmp/tessera-dataset-fuzz-XXXXXX";
    Check(mkdtemp(dir_template) != nullptr, "mkdtemp failed", std::strerror(errno));
    dir_ = dir_template;
    const std::string a = FdPath(a_);
    const std::string b = FdPath(b_);
    for (const char* name :
         {"test_batch.bin", "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
          "data_batch_4.bin", "data_batch_5.bin", "test.bin", "train.bin",
          "t10k-images-idx3-ubyte", "train-images-idx3-ubyte"}) {
      std::filesystem::create_symlink(a, dir_ / name);
    }
    for (const char* name : {"t10k-labels-idx1-ubyte", "train-labels-idx1-ubyte"}) {
      std::filesystem::create_symlink(b, dir_ / name);
    }
  }
  ~MemFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir() const { return dir_.string(); }
  std::string a_path() const { return FdPath(a_); }
  void SetA(const uint8_t* data, size_t size) { Set(a_, data, size); }
  void SetB(const uint8_t* data, size_t size) { Set(b_, data, size); }

 private:
  static std::string FdPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }
  static void Set(int fd, const uint8_t* data, size_t size) {
    Check(ftruncate(fd, 0) == 0, "ftruncate failed", std::strerror(errno));
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      Check(n > 0, "pwrite failed", std::strerror(errno));
      done += static_cast<size_t>(n);
    }
  }

  int a_ = -1;
  int b_ = -1;
  std::filesystem::path dir_;
};

// Made on first use; its destructor removes the directory when the fuzzer
// exits normally (a crash leaves it in /tmp).
MemFiles& Files() {
  static MemFiles files;
  return files;
}

void CheckOnlyBadData(const absl::Status& status, absl::string_view what) {
  Check(status.ok() || absl::IsDataLoss(status) || absl::IsInvalidArgument(status), what,
        status.ToString());
}

void CheckDataset(const tt::ImageDataset& d, int64_t limit) {
  Check(tt::ValidateImageDataset(d).ok(), "loader returned an inconsistent dataset",
        tt::ValidateImageDataset(d).ToString());
  Check(limit <= 0 || d.size() <= limit, "dataset holds more images than the limit");
}

void FuzzCifar(tt::CifarVariant variant, tt::Split split, int64_t limit,
               const uint8_t* file, size_t size) {
  Files().SetA(file, size);
  const absl::StatusOr<tt::ImageDataset> d =
      tt::LoadCifar(variant, Files().dir(), split, limit);
  CheckOnlyBadData(d.status(), "LoadCifar: unexpected code");
  if (!d.ok()) return;
  CheckDataset(*d, limit);

  // The same file stands for every file of the split: the dataset is its
  // records once per file, cut at the limit.
  const tt::CifarLayout& layout = tt::GetCifarLayout(variant);
  const auto record = static_cast<size_t>(layout.record_bytes());
  const size_t records = size / record;
  const size_t files =
      (split == tt::Split::kTrain ? layout.train_files : layout.test_files).size();
  size_t expected = records * files;
  if (limit > 0) expected = std::min(expected, static_cast<size_t>(limit));
  Check(d->channels == 3 && d->height == 32 && d->width == 32 &&
            d->num_classes == layout.num_classes,
        "CIFAR dataset has the wrong shape");
  Check(static_cast<size_t>(d->size()) == expected, "CIFAR image count is wrong",
        absl::StrCat(d->size(), " images, expected ", expected));
  for (size_t i = 0; i < expected; ++i) {
    const uint8_t* in = file + (i % records) * record;
    Check(d->labels[i] == in[layout.label_index], "CIFAR label differs from the file");
    Check(std::memcmp(&d->pixels[i * tt::CifarLayout::kPixelBytes],
                      in + layout.label_bytes, tt::CifarLayout::kPixelBytes) == 0,
          "CIFAR pixels differ from the file");
  }
}

bool IsGzip(const uint8_t* data, size_t size) {
  return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

void FuzzIdx(int rank, const uint8_t* file, size_t size) {
  Files().SetA(file, size);
  tt::IdxReadOptions options;
  options.max_payload_bytes = kMaxIdxPayload;
  const absl::StatusOr<tt::IdxArray> array =
      tt::ReadIdxFile(Files().a_path(), rank, options);
  CheckOnlyBadData(array.status(), "ReadIdxFile: unexpected code");
  if (!array.ok()) return;
  Check(array->dims.size() == static_cast<size_t>(rank), "IDX array has the wrong rank");
  int64_t payload = 1;
  for (const int64_t dim : array->dims) {
    Check(dim >= 0 && dim <= options.max_dimension, "IDX dimension out of range");
    payload *= dim;
  }
  Check(payload <= options.max_payload_bytes &&
            array->data.size() == static_cast<size_t>(payload),
        "IDX payload size differs from the product of its dimensions");
  if (!IsGzip(file, size)) {
    const size_t header = 4 + 4 * static_cast<size_t>(rank);
    Check(size == header + array->data.size() &&
              (array->data.empty() ||
               std::memcmp(array->data.data(), file + header, array->data.size()) == 0),
          "plain IDX payload differs from the file's bytes after the header");
  }
}

void FuzzFashion(tt::Split split, int64_t limit, const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t images = std::min<size_t>((size_t{data[0]} << 8) | data[1], size - 2);
  Files().SetA(data + 2, images);
  Files().SetB(data + 2 + images, size - 2 - images);
  tt::IdxReadOptions options;
  options.max_payload_bytes = kMaxIdxPayload;
  const absl::StatusOr<tt::ImageDataset> d =
      tt::LoadFashionMnist(Files().dir(), split, limit, options);
  CheckOnlyBadData(d.status(), "LoadFashionMnist: unexpected code");
  if (!d.ok()) return;
  CheckDataset(*d, limit);
  Check(d->channels == 1 && d->num_classes == 10,
        "Fashion-MNIST dataset has the wrong shape");
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  namespace tt = ::tessera::trainer;
  if (size < 2) return 0;
  const auto mode = static_cast<Mode>(data[0] % kModes);
  const int64_t limit = data[1];
  const uint8_t* rest = data + 2;
  const size_t rest_size = size - 2;
  switch (mode) {
    case kCifar10Test:
      FuzzCifar(tt::CifarVariant::kCifar10, tt::Split::kTest, limit, rest, rest_size);
      break;
    case kCifar10Train:
      FuzzCifar(tt::CifarVariant::kCifar10, tt::Split::kTrain, limit, rest, rest_size);
      break;
    case kCifar100Test:
      FuzzCifar(tt::CifarVariant::kCifar100, tt::Split::kTest, limit, rest, rest_size);
      break;
    case kCifar100Train:
      FuzzCifar(tt::CifarVariant::kCifar100, tt::Split::kTrain, limit, rest, rest_size);
      break;
    case kIdxRank1:
      FuzzIdx(1, rest, rest_size);
      break;
    case kIdxRank3:
      FuzzIdx(3, rest, rest_size);
      break;
    case kFashionTest:
      FuzzFashion(tt::Split::kTest, limit, rest, rest_size);
      break;
    case kFashionTrain:
      FuzzFashion(tt::Split::kTrain, limit, rest, rest_size);
      break;
    case kModes:
      break;
  }
  return 0;
}
