#include "worker/trainer/model/safetensors.h"

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string FreshDirectory(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

// A file with this exact header text and data (no padding).
std::string FileWith(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  std::string out(reinterpret_cast<const char*>(&length), 8);
  return out + header + data;
}

// The status of parsing `bytes`.
absl::Status ParseStatus(std::string bytes) {
  return SafetensorsFile::FromBytes(std::move(bytes)).status();
}

TEST(SafetensorsTest, RoundTripsEveryDtypeShapeAndMetadata) {
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, 7.0f};
  const std::vector<double> f64 = {0.1, -1e300};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000};
  const std::vector<uint16_t> bf16 = {0x3f80, 0x4049};
  const std::vector<int64_t> i64 = {-1, std::numeric_limits<int64_t>::max()};
  const std::vector<int32_t> i32 = {7, -7, 0};
  const std::vector<uint8_t> u8 = {0, 255};
  const std::string f32_bytes = Bytes(f32), f64_bytes = Bytes(f64),
                    f16_bytes = Bytes(f16), bf16_bytes = Bytes(bf16),
                    i64_bytes = Bytes(i64), i32_bytes = Bytes(i32), u8_bytes = Bytes(u8),
                    scalar_bytes = f32_bytes.substr(0, 4);
  const std::vector<TensorToWrite> tensors = {
      {"weight", SafetensorsDtype::kF32, {2, 3}, f32_bytes},
      {"double", SafetensorsDtype::kF64, {2}, f64_bytes},
      {"half", SafetensorsDtype::kF16, {2}, f16_bytes},
      {"brain", SafetensorsDtype::kBF16, {1, 2}, bf16_bytes},
      {"long", SafetensorsDtype::kI64, {2}, i64_bytes},
      {"int", SafetensorsDtype::kI32, {3}, i32_bytes},
      {"bytes", SafetensorsDtype::kU8, {2}, u8_bytes},
      {"empty", SafetensorsDtype::kF32, {0, 4}, ""},
      {"scalar", SafetensorsDtype::kF32, {}, scalar_bytes},
  };
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"class_names", "[\"cat\",\"dog\"]"}};
  const std::string dir = FreshDirectory("safetensors-roundtrip");
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  // Header padded so the data starts 8-byte aligned; no temporaries left.
  const std::string raw = Slurp(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, raw.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata(), metadata);
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const TensorToWrite& written : tensors) {
    const TensorView* read = (*file)->Find(written.name);
    ASSERT_NE(read, nullptr) << written.name;
    EXPECT_EQ(read->dtype, written.dtype) << written.name;
    EXPECT_EQ(read->shape, written.shape) << written.name;
    EXPECT_EQ(read->data, written.data) << written.name;
  }
  EXPECT_EQ((*file)->Find("missing"), nullptr);
  // Sorted by name.
  for (size_t i = 1; i < (*file)->tensors().size(); ++i) {
    EXPECT_LT((*file)->tensors()[i - 1].name, (*file)->tensors()[i].name);
  }
  // The same bytes from a buffer.
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> from_bytes =
      SafetensorsFile::FromBytes(raw);
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  EXPECT_EQ((*from_bytes)->Find("long")->data, i64_bytes);
}

TEST(SafetensorsTest, ConvertsHalfBfloatAndDoubleToFloat32) {
  // 1, -2, largest half, smallest subnormal, -0, +inf.
  const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00};
  const std::string half_bytes = Bytes(half);
  TensorView view{"h", SafetensorsDtype::kF16, {6}, half_bytes};
  absl::StatusOr<std::vector<float>> values = TensorToFloat32(view);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24),
                                         -0.0f, std::numeric_limits<float>::infinity()}));
  EXPECT_TRUE(std::signbit((*values)[4]));
  // A NaN stays a NaN.
  const std::vector<uint16_t> nan = {0x7e00};
  const std::string nan_bytes = Bytes(nan);
  values = TensorToFloat32({"n", SafetensorsDtype::kF16, {1}, nan_bytes});
  ASSERT_TRUE(values.ok());
  EXPECT_TRUE(std::isnan((*values)[0]));

  const std::vector<uint16_t> bf16 = {0x3f80, 0xc0a0};  // 1, -5
  const std::string bf16_bytes = Bytes(bf16);
  values = TensorToFloat32({"b", SafetensorsDtype::kBF16, {2}, bf16_bytes});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(*values, (std::vector<float>{1.0f, -5.0f}));

  const std::vector<double> f64 = {0.1, -3.0};
  const std::string f64_bytes = Bytes(f64);
  values = TensorToFloat32({"d", SafetensorsDtype::kF64, {2}, f64_bytes});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(*values, (std::vector<float>{0.1f, -3.0f}));

  const std::vector<int64_t> ints = {1};
  const std::string int_bytes = Bytes(ints);
  values = TensorToFloat32({"i", SafetensorsDtype::kI64, {1}, int_bytes});
  EXPECT_TRUE(absl::IsInvalidArgument(values.status()));
}

TEST(SafetensorsTest, RefusesTruncatedFiles) {
  const std::vector<float> f32 = {1, 2, 3, 4};
  const std::string data = Bytes(f32);
  absl::StatusOr<std::string> good =
      SerializeSafetensors({{"w", SafetensorsDtype::kF32, {4}, data}}, {});
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(ParseStatus(*good).ok());

  absl::Status status = ParseStatus(good->substr(0, 5));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("truncated"));

  status = ParseStatus(good->substr(0, 20));  // inside the header
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("past the end of the file"));

  status = ParseStatus(good->substr(0, good->size() - 1));  // inside the data
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("out of range"));

  status = ParseStatus("");
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
}

TEST(SafetensorsTest, RefusesOffsetsOutOfRangeOverlappingOrLeavingGaps) {
  const std::string data(16, '\0');
  absl::Status status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,24]}})", data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("out of range"));
  EXPECT_THAT(status.message(), HasSubstr("\"a\""));

  status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("out of range"));

  status =
      ParseStatus(FileWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})",
                           data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("overlap"));

  status =
      ParseStatus(FileWith(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                           data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("gap"));

  // Trailing bytes nobody claims.
  status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cover 8 of the 16"));

  status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
}

TEST(SafetensorsTest, RefusesAHeaderPastTheLimitOrTheFile) {
  std::string file(8, '\0');
  const uint64_t huge = uint64_t{200} << 20;
  std::memcpy(file.data(), &huge, 8);
  absl::Status status = ParseStatus(file + "{}");
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("past the limit"));

  const uint64_t max = std::numeric_limits<uint64_t>::max();
  std::memcpy(file.data(), &max, 8);
  status = ParseStatus(file);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;

  // Under the limit but past the file.
  const uint64_t kilobyte = 1024;
  std::memcpy(file.data(), &kilobyte, 8);
  status = ParseStatus(file + "{}");
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("past the end of the file"));

  // A smaller limit applies.
  SafetensorsFile::Options options;
  options.max_header_bytes = 4;
  status = SafetensorsFile::FromBytes(FileWith(R"({"__metadata__":{}})", ""), options)
               .status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
}

TEST(SafetensorsTest, RefusesDuplicateNames) {
  const std::string data(8, '\0');
  absl::Status status =
      ParseStatus(FileWith(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("duplicate name"));
  EXPECT_THAT(status.message(), HasSubstr("\"a\""));

  // Inside an entry too.
  status = ParseStatus(FileWith(
      R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("duplicate name"));
}

TEST(SafetensorsTest, RefusesUnknownDtypes) {
  const absl::Status status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("unknown dtype \"F33\""));
  EXPECT_THAT(status.message(), HasSubstr("\"a\""));
  EXPECT_FALSE(ParseSafetensorsDtype("f32").ok());
  EXPECT_EQ(*ParseSafetensorsDtype("BF16"), SafetensorsDtype::kBF16);
}

TEST(SafetensorsTest, RefusesAShapeThatDoesNotMatchItsBytes) {
  absl::Status status = ParseStatus(FileWith(
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 0)));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("shape/size mismatch"));
  EXPECT_THAT(status.message(), HasSubstr("[3]"));

  // A product that wraps around 2^64 is no match either.
  status = ParseStatus(FileWith(R"({"a":{"dtype":"F32","shape":[4611686018427387904,)"
                                R"(4611686018427387904],"data_offsets":[0,0]}})",
                                ""));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("shape/size mismatch"));

  status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  status = ParseStatus(
      FileWith(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
}

TEST(SafetensorsTest, RefusesBadJsonAndBadEntries) {
  absl::Status status = ParseStatus(FileWith(R"({"a":)", ""));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("not valid JSON"));

  status = ParseStatus(FileWith("[]", ""));
  EXPECT_THAT(status.message(), HasSubstr("not a JSON object"));
  status = ParseStatus(FileWith(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("data_offsets"));
  status = ParseStatus(FileWith(R"({"__metadata__":{"k":1}})", ""));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("__metadata__"));
  // Not UTF-8.
  status = ParseStatus(FileWith("{\"\xff\":{}}", ""));
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  // An empty file of tensors is fine.
  EXPECT_TRUE(ParseStatus(FileWith("{}", "")).ok());
}

TEST(SafetensorsTest, WriterRefusesInconsistentTensors) {
  const std::string four(4, '\0');
  EXPECT_TRUE(absl::IsInvalidArgument(
      SerializeSafetensors({{"a", SafetensorsDtype::kF32, {2}, four}}, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SerializeSafetensors({{"a", SafetensorsDtype::kF32, {1}, four},
                            {"a", SafetensorsDtype::kF32, {1}, four}},
                           {})
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SerializeSafetensors({{"__metadata__", SafetensorsDtype::kF32, {1}, four}}, {})
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SerializeSafetensors({}, {{"k", std::string("\xff", 1)}}).status()));
}

TEST(SafetensorsTest, OpenReportsAMissingFileAsNotFound) {
  const absl::Status status =
      SafetensorsFile::Open(FreshDirectory("safetensors-missing") + "/none").status();
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

// The format as its documentation describes it, written by Python's standard
// library alone (no safetensors package): the reader must accept what another
// implementation writes.
TEST(SafetensorsTest, ReadsAFileWrittenByPythonFromTheDocumentedFormat) {
  if (::access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "/usr/bin/python3 is not installed";
  }
  const std::string dir = FreshDirectory("safetensors-python");
  const std::string script = dir + "/write.py";
  const std::string path = dir + "/py.safetensors";
  {
    std::ofstream out(script);
    out << R"(import json, struct, sys
tensors = [("b.weight", "F32", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6.5)),
           ("a.half", "F16", [2], struct.pack("<2e", 0.5, -1.5)),
           ("c.count", "I64", [1], struct.pack("<q", -42))]
header, offset, data = {"__metadata__": {"format": "pt"}}, 0, b""
for name, dtype, shape, raw in tensors:
    header[name] = {"dtype": dtype, "shape": shape,
                    "data_offsets": [offset, offset + len(raw)]}
    offset += len(raw)
    data += raw
text = json.dumps(header).encode("utf-8")
text += b" " * ((8 - len(text) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
)";
  }
  ASSERT_EQ(std::system(absl::StrCat("/usr/bin/python3 ", script, " ", path).c_str()), 0);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const TensorView* weight = (*file)->Find("b.weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*TensorToFloat32(*weight), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  const TensorView* half = (*file)->Find("a.half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(*TensorToFloat32(*half), (std::vector<float>{0.5f, -1.5f}));
  const TensorView* count = (*file)->Find("c.count");
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->dtype, SafetensorsDtype::kI64);
  int64_t value = 0;
  std::memcpy(&value, count->data.data(), 8);
  EXPECT_EQ(value, -42);
}

}  // namespace
}  // namespace tessera::trainer
