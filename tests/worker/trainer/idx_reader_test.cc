#include "worker/trainer/data/idx_reader.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> IdxBytes(uint8_t type, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> bytes = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (const uint32_t d : dims) {
    bytes.push_back(static_cast<uint8_t>(d >> 24));
    bytes.push_back(static_cast<uint8_t>(d >> 16));
    bytes.push_back(static_cast<uint8_t>(d >> 8));
    bytes.push_back(static_cast<uint8_t>(d));
  }
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

std::vector<uint8_t> Iota(size_t n, uint8_t start = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i);
  return v;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("idx_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WritePlain(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::string WriteGzip(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(file);
    return path;
  }

  // Writes a Fashion-MNIST-style split with `n` 2x3 images whose labels are
  // `labels`.
  void WriteSplit(const std::string& prefix, uint32_t n,
                  const std::vector<uint8_t>& labels, bool gzip) {
    const auto images = IdxBytes(0x08, {n, 2, 3}, Iota(n * 6));
    const auto label_bytes =
        IdxBytes(0x08, {static_cast<uint32_t>(labels.size())}, labels);
    const std::string image_name = prefix + "-images-idx3-ubyte";
    const std::string label_name = prefix + "-labels-idx1-ubyte";
    if (gzip) {
      WriteGzip(image_name + ".gz", images);
      WriteGzip(label_name + ".gz", label_bytes);
    } else {
      WritePlain(image_name, images);
      WritePlain(label_name, label_bytes);
    }
  }

  std::filesystem::path dir_;
};

TEST_F(IdxReaderTest, ReadsPlainFileDimensionsAndPayload) {
  const std::string path = WritePlain("a.idx", IdxBytes(0x08, {4, 2, 3}, Iota(24)));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, 3);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(array->data, Iota(24));
}

TEST_F(IdxReaderTest, ReadsGzipFileToSameContentAsPlain) {
  const auto bytes = IdxBytes(0x08, {5}, {9, 8, 7, 6, 5});
  absl::StatusOr<IdxArray> plain = ReadIdxFile(WritePlain("p.idx", bytes), 1);
  absl::StatusOr<IdxArray> gzip = ReadIdxFile(WriteGzip("g.idx.gz", bytes), 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(gzip.ok()) << gzip.status();
  EXPECT_EQ(gzip->dims, plain->dims);
  EXPECT_EQ(gzip->data, (std::vector<uint8_t>{9, 8, 7, 6, 5}));
}

TEST_F(IdxReaderTest, RejectsBadMagicWithClearError) {
  std::vector<uint8_t> bytes = IdxBytes(0x08, {2}, {1, 2});
  bytes[0] = 0x1f;
  absl::StatusOr<IdxArray> array = ReadIdxFile(WritePlain("bad.idx", bytes), 1);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("bad magic"));
  EXPECT_THAT(array.status().message(), HasSubstr("bad.idx"));
}

TEST_F(IdxReaderTest, RejectsElementTypeOtherThanUnsignedByte) {
  absl::StatusOr<IdxArray> array =
      ReadIdxFile(WritePlain("float.idx", IdxBytes(0x0D, {1}, {0, 0, 0, 0})), 1);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("element type 0x0d"));
}

TEST_F(IdxReaderTest, RejectsUnexpectedNumberOfDimensions) {
  absl::StatusOr<IdxArray> array =
      ReadIdxFile(WritePlain("rank.idx", IdxBytes(0x08, {2, 2}, Iota(4))), 3);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("has 2 dimensions, expected 3"));
}

TEST_F(IdxReaderTest, RejectsTruncatedPayloadNamingBothSizes) {
  absl::StatusOr<IdxArray> array =
      ReadIdxFile(WritePlain("short.idx", IdxBytes(0x08, {10, 2, 2}, Iota(30))), 3);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(array.status().message(), HasSubstr("40"));
  EXPECT_THAT(array.status().message(), HasSubstr("30"));
}

TEST_F(IdxReaderTest, RejectsTruncatedHeader) {
  std::vector<uint8_t> bytes = IdxBytes(0x08, {10, 2, 2}, {});
  bytes.resize(9);
  absl::StatusOr<IdxArray> array = ReadIdxFile(WritePlain("header.idx", bytes), 3);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("truncated header"));
}

TEST_F(IdxReaderTest, RejectsTrailingBytesAsSizeMismatch) {
  absl::StatusOr<IdxArray> array =
      ReadIdxFile(WritePlain("long.idx", IdxBytes(0x08, {3}, Iota(5))), 1);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("size mismatch"));
}

TEST_F(IdxReaderTest, RejectsCutGzipStream) {
  const std::string gz = WriteGzip("full.gz", IdxBytes(0x08, {4000}, Iota(4000)));
  std::ifstream in(gz, std::ios::binary);
  std::vector<uint8_t> compressed((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  compressed.resize(compressed.size() / 2);
  absl::StatusOr<IdxArray> array = ReadIdxFile(WritePlain("cut.gz", compressed), 1);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(IdxReaderTest, RejectsHeaderPromisingMoreThanTheLimitBeforeAllocating) {
  IdxReadOptions options;
  options.max_payload_bytes = 1000;
  absl::StatusOr<IdxArray> array = ReadIdxFile(
      WritePlain("huge.idx", IdxBytes(0x08, {100000, 28, 28}, {})), 3, options);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("more than 1000 bytes"));
}

TEST_F(IdxReaderTest, MissingFileIsNotFound) {
  absl::StatusOr<IdxArray> array = ReadIdxFile((dir_ / "absent.idx").string(), 1);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(IdxReaderTest, LoadsSplitFromGzipFilesAndKeepsOnlyTheLimit) {
  WriteSplit("train", 5, {3, 1, 4, 1, 5}, /*gzip=*/true);
  absl::StatusOr<ImageDataset> all = LoadFashionMnist(dir_.string(), Split::kTrain, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 5);
  EXPECT_EQ(all->channels, 1);
  EXPECT_EQ(all->height, 2);
  EXPECT_EQ(all->width, 3);
  EXPECT_EQ(all->num_classes, 10);
  EXPECT_EQ(all->labels, (std::vector<int64_t>{3, 1, 4, 1, 5}));
  EXPECT_EQ(all->pixels, Iota(30));

  absl::StatusOr<ImageDataset> first = LoadFashionMnist(dir_.string(), Split::kTrain, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->labels, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(first->pixels, Iota(12));
}

TEST_F(IdxReaderTest, LoadsTestSplitFromPlainFiles) {
  WriteSplit("t10k", 2, {0, 9}, /*gzip=*/false);
  absl::StatusOr<ImageDataset> test = LoadFashionMnist(dir_.string(), Split::kTest, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->labels, (std::vector<int64_t>{0, 9}));
}

TEST_F(IdxReaderTest, RejectsImageAndLabelCountMismatch) {
  WritePlain("train-images-idx3-ubyte", IdxBytes(0x08, {3, 2, 3}, Iota(18)));
  WritePlain("train-labels-idx1-ubyte", IdxBytes(0x08, {2}, {1, 2}));
  absl::StatusOr<ImageDataset> d = LoadFashionMnist(dir_.string(), Split::kTrain, 0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr("3 images but"));
}

TEST_F(IdxReaderTest, RejectsLabelOutsideTheTenClasses) {
  WriteSplit("train", 3, {1, 10, 2}, /*gzip=*/false);
  absl::StatusOr<ImageDataset> d = LoadFashionMnist(dir_.string(), Split::kTrain, 0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr("label 10 at index 1"));
}

TEST_F(IdxReaderTest, MissingSplitFilesAreNotFoundNamingTheFile) {
  absl::StatusOr<ImageDataset> d = LoadFashionMnist(dir_.string(), Split::kTest, 0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("t10k-images-idx3-ubyte"));
}

TEST(InstalledFashionMnistTest, LoadsBothSplitsWithBalancedClasses) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << dir;
  }
  absl::StatusOr<ImageDataset> test = LoadFashionMnist(dir, Split::kTest, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->height, 28);
  EXPECT_EQ(test->width, 28);
  std::vector<int> per_class(10);
  for (const int64_t label : test->labels) ++per_class[static_cast<size_t>(label)];
  for (const int count : per_class) EXPECT_EQ(count, 1000);
}

}  // namespace
}  // namespace tessera::trainer
