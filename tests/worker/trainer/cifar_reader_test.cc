#include "worker/trainer/data/cifar_reader.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/data/dataset_loader.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

constexpr int64_t kPixels = 3072;

// The pixel bytes of record `id`: a pattern that differs per record and position.
std::vector<uint8_t> PixelsOf(int id) {
  std::vector<uint8_t> pixels(kPixels);
  for (int64_t p = 0; p < kPixels; ++p) {
    pixels[static_cast<size_t>(p)] = static_cast<uint8_t>((id * 37 + p * 7) % 251);
  }
  return pixels;
}

// One record in the real layout: the label bytes, then 3072 pixel bytes.
std::vector<uint8_t> Record(const std::vector<uint8_t>& label_bytes, int id) {
  std::vector<uint8_t> record = label_bytes;
  const std::vector<uint8_t> pixels = PixelsOf(id);
  record.insert(record.end(), pixels.begin(), pixels.end());
  return record;
}

class CifarReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("cifar_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::filesystem::path& relative,
                    const std::vector<uint8_t>& bytes) {
    const std::filesystem::path path = dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }

  // CIFAR-10 files under `subdir` with `per_file` records each; record k of the
  // training split (k counted across the five batches in order) has id k and
  // label k % 10; the test file's records have ids 1000 + k.
  void WriteCifar10(const std::string& subdir, int per_file) {
    for (int f = 0; f < 5; ++f) {
      std::vector<uint8_t> bytes;
      for (int r = 0; r < per_file; ++r) {
        const int id = f * per_file + r;
        const std::vector<uint8_t> record = Record({static_cast<uint8_t>(id % 10)}, id);
        bytes.insert(bytes.end(), record.begin(), record.end());
      }
      Write(std::filesystem::path(subdir) /
                ("data_batch_" + std::to_string(f + 1) + ".bin"),
            bytes);
    }
    std::vector<uint8_t> test;
    for (int r = 0; r < per_file; ++r) {
      const std::vector<uint8_t> record =
          Record({static_cast<uint8_t>(9 - r % 10)}, 1000 + r);
      test.insert(test.end(), record.begin(), record.end());
    }
    Write(std::filesystem::path(subdir) / "test_batch.bin", test);
  }

  // CIFAR-100 train.bin and test.bin under `subdir`: record k has coarse label
  // k % 20, fine label (3 * k + 1) % 100 and id k (test: 500 + k).
  void WriteCifar100(const std::string& subdir, int train_records, int test_records) {
    for (const auto& [name, count, base] :
         {std::tuple<std::string, int, int>{"train.bin", train_records, 0},
          std::tuple<std::string, int, int>{"test.bin", test_records, 500}}) {
      std::vector<uint8_t> bytes;
      for (int k = 0; k < count; ++k) {
        const std::vector<uint8_t> record = Record(
            {static_cast<uint8_t>(k % 20), static_cast<uint8_t>((3 * k + 1) % 100)},
            base + k);
        bytes.insert(bytes.end(), record.begin(), record.end());
      }
      Write(std::filesystem::path(subdir) / name, bytes);
    }
  }

  std::vector<uint8_t> ImageOf(const ImageDataset& d, int64_t i) {
    const auto begin = d.pixels.begin() + i * d.image_bytes();
    return std::vector<uint8_t>(begin, begin + d.image_bytes());
  }

  std::filesystem::path dir_;
};

TEST_F(CifarReaderTest, LoadsCifar10TrainingSplitFromAllFiveBatchesInOrder) {
  WriteCifar10("", 3);
  const absl::StatusOr<ImageDataset> d =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTrain, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 15);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 32);
  EXPECT_EQ(d->width, 32);
  EXPECT_EQ(d->num_classes, 10);
  for (int k = 0; k < 15; ++k) {
    EXPECT_EQ(d->labels[static_cast<size_t>(k)], k % 10) << "record " << k;
    // The record's CHW bytes are the image's NCHW bytes, unchanged.
    EXPECT_EQ(ImageOf(*d, k), PixelsOf(k)) << "record " << k;
  }
}

TEST_F(CifarReaderTest, LoadsCifar10TestSplitFromTheArchiveSubdirectory) {
  WriteCifar10("cifar-10-batches-bin", 4);
  const absl::StatusOr<ImageDataset> d =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTest, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 4);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(d->labels[static_cast<size_t>(k)], 9 - k);
    EXPECT_EQ(ImageOf(*d, k), PixelsOf(1000 + k));
  }
}

TEST_F(CifarReaderTest, LimitKeepsTheFirstImagesAcrossFilesAndReadsNoFurther) {
  WriteCifar10("", 3);
  // Batch 4 is corrupt, but images 0..6 lie in batches 1 to 3.
  Write("data_batch_4.bin", std::vector<uint8_t>(100, 0));
  const absl::StatusOr<ImageDataset> d =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTrain, 7);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 7);
  EXPECT_EQ(ImageOf(*d, 6), PixelsOf(6));
  EXPECT_EQ(d->labels[6], 6);
}

TEST_F(CifarReaderTest, Cifar100UsesTheFineLabelWithOneHundredClasses) {
  WriteCifar100("cifar-100-binary", 40, 5);
  const absl::StatusOr<ImageDataset> train =
      LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTrain, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_classes, 100);
  ASSERT_EQ(train->size(), 40);
  for (int k = 0; k < 40; ++k) {
    EXPECT_EQ(train->labels[static_cast<size_t>(k)], (3 * k + 1) % 100);
    EXPECT_EQ(ImageOf(*train, k), PixelsOf(k));
  }
  const absl::StatusOr<ImageDataset> test =
      LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTest, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  ASSERT_EQ(test->size(), 5);
  EXPECT_EQ(ImageOf(*test, 4), PixelsOf(504));
}

TEST_F(CifarReaderTest, MissingFileIsNotFoundNamingItAndBothPlacesSearched) {
  WriteCifar10("", 2);
  std::filesystem::remove(dir_ / "data_batch_3.bin");
  const absl::Status status =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTrain, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("data_batch_3.bin"), HasSubstr(dir_.string()),
                    HasSubstr((dir_ / "cifar-10-batches-bin").string())));

  const absl::Status empty_dir =
      LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTest, 0).status();
  EXPECT_EQ(empty_dir.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(empty_dir.message(),
              AllOf(HasSubstr("test.bin"), HasSubstr("cifar-100-binary")));
}

TEST_F(CifarReaderTest, TruncatedFileIsDataLossNamingFileSizeAndRecordSize) {
  WriteCifar10("", 2);
  // Two records and half of a third.
  std::vector<uint8_t> bytes;
  for (int id = 0; id < 2; ++id) {
    const std::vector<uint8_t> record = Record({1}, id);
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  bytes.resize(bytes.size() + 1500, 7);
  const std::string path = Write("data_batch_2.bin", bytes);
  const absl::Status status =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTrain, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(path), HasSubstr(std::to_string(bytes.size())),
                    HasSubstr("3073-byte")));
}

TEST_F(CifarReaderTest, EmptyFileIsDataLoss) {
  WriteCifar100("", 3, 3);
  const std::string path = Write("test.bin", {});
  const absl::Status status =
      LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTest, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(path), HasSubstr("3074-byte")));
}

TEST_F(CifarReaderTest, Cifar100FileReadAsCifar10IsRejectedBySize) {
  // Two 3074-byte records are not a whole number of 3073-byte ones.
  WriteCifar10("", 1);
  std::vector<uint8_t> bytes;
  for (int id = 0; id < 2; ++id) {
    const std::vector<uint8_t> record = Record({1, 1}, id);
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  Write("test_batch.bin", bytes);
  EXPECT_EQ(
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTest, 0).status().code(),
      absl::StatusCode::kDataLoss);
}

TEST_F(CifarReaderTest, LabelOutOfRangeIsDataLossNamingFileAndRecord) {
  WriteCifar10("", 2);
  std::vector<uint8_t> bytes = Record({3}, 0);
  const std::vector<uint8_t> bad = Record({10}, 1);
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  const std::string path = Write("data_batch_5.bin", bytes);
  const absl::Status status =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTrain, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(path), HasSubstr("record 1"),
                                      HasSubstr("label 10"), HasSubstr("[0, 10)")));
}

TEST_F(CifarReaderTest, Cifar100ChecksBothFineAndCoarseLabels) {
  WriteCifar100("", 2, 2);
  Write("train.bin", Record({0, 100}, 0));
  absl::Status status =
      LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTrain, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("label 100"), HasSubstr("[0, 100)")));

  Write("train.bin", Record({20, 5}, 0));
  status = LoadCifar(CifarVariant::kCifar100, dir_.string(), Split::kTrain, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("coarse label 20"), HasSubstr("[0, 20)")));
}

TEST_F(CifarReaderTest, FileAboveTheSizeLimitIsRejected) {
  WriteCifar10("", 4);
  CifarReadOptions options;
  options.max_file_bytes = 3 * 3073;
  const absl::Status status =
      LoadCifar(CifarVariant::kCifar10, dir_.string(), Split::kTest, 0, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("limit"));
}

TEST_F(CifarReaderTest, DatasetNamesDispatchToTheCifarLoaders) {
  EXPECT_THAT(KnownDatasets(), AllOf(Contains("cifar10"), Contains("cifar100")));
  WriteCifar10("cifar-10-batches-bin", 2);
  WriteCifar100("cifar-100-binary", 6, 2);
  DatasetRequest request;
  request.data_dir = dir_.string();
  request.name = "cifar10";
  absl::StatusOr<ImageDataset> d = LoadImageDataset(request);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 10);
  EXPECT_EQ(d->num_classes, 10);
  request.name = "cifar100";
  request.limit = 4;
  d = LoadImageDataset(request);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 4);
  EXPECT_EQ(d->num_classes, 100);
}

TEST(AugmentsByDefaultTest, OnForCifarOffOtherwise) {
  EXPECT_TRUE(AugmentsByDefault("cifar10"));
  EXPECT_TRUE(AugmentsByDefault("cifar100"));
  EXPECT_FALSE(AugmentsByDefault("fashion-mnist"));
  EXPECT_FALSE(AugmentsByDefault("synthetic"));
}

}  // namespace
}  // namespace tessera::trainer
