// Fuzzes the safetensors reader of the trainer (worker/trainer/model/safetensors.h),
// which reads pretrained weights from files users download: the whole input is
// the file, parsed from memory (SafetensorsFile::FromBytes, the same checks as
// Open on a mapped file).
//
// Besides crashes and sanitizer reports, these invariants abort the run:
//   - errors are DataLoss or InvalidArgument (bad content), never another code;
//   - an accepted file's tensors are sorted by name, lie inside the input, have
//     exactly num_elements * dtype-size bytes, and tile the data after the
//     header without gaps or overlaps; Find returns each of them;
//   - floating-point tensors convert to float32 with one value per element;
//   - writing the tensors and metadata back (SerializeSafetensors) gives a file
//     that reads back to the same names, dtypes, shapes, bytes and metadata.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_check.h"
#include "worker/trainer/model/safetensors.h"

namespace tessera::fuzz {
namespace {

namespace tt = ::tessera::trainer;

// A small header limit keeps the fuzzer's inputs meaningful; the checks are the
// same as with the default.
constexpr int64_t kMaxHeader = int64_t{1} << 16;

void CheckOnlyBadData(const absl::Status& status, absl::string_view what) {
  Check(status.ok() || absl::IsDataLoss(status) || absl::IsInvalidArgument(status), what,
        status.ToString());
}

bool IsFloat(tt::SafetensorsDtype dtype) {
  return dtype == tt::SafetensorsDtype::kF32 || dtype == tt::SafetensorsDtype::kF16 ||
         dtype == tt::SafetensorsDtype::kBF16 || dtype == tt::SafetensorsDtype::kF64;
}

// `begin` and `size`: the file's own bytes, which its views point into.
void CheckAccepted(const tt::SafetensorsFile& file, const char* begin, size_t size) {
  uint64_t header_length = 0;
  std::memcpy(&header_length, begin, 8);
  const char* data = begin + 8 + header_length;
  const size_t data_size = size - 8 - header_length;
  std::vector<std::pair<size_t, size_t>> ranges;
  const std::vector<tt::TensorView>& tensors = file.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tt::TensorView& t = tensors[i];
    Check(i == 0 || tensors[i - 1].name < t.name, "tensors are not sorted by unique name",
          t.name);
    Check(file.Find(t.name) == &t, "Find does not return the tensor", t.name);
    Check(t.data.data() >= data && t.data.data() + t.data.size() <= data + data_size,
          "tensor bytes lie outside the data section", t.name);
    int64_t elements = 1;
    for (const int64_t d : t.shape) {
      Check(d >= 0, "negative dimension", t.name);
      elements *= d;
    }
    Check(static_cast<uint64_t>(elements) * tt::SafetensorsDtypeSize(t.dtype) ==
              t.data.size(),
          "tensor byte count differs from its shape", t.name);
    ranges.emplace_back(t.data.data() - data, t.data.data() - data + t.data.size());
    if (IsFloat(t.dtype)) {
      const absl::StatusOr<std::vector<float>> values = tt::TensorToFloat32(t);
      Check(values.ok() && values->size() == static_cast<size_t>(elements),
            "float conversion failed or has the wrong count", t.name);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  size_t covered = 0;
  for (const auto& [first, last] : ranges) {
    Check(first == covered, "tensor ranges do not tile the data");
    covered = last;
  }
  Check(covered == data_size, "tensor ranges do not cover the data");

  // Round trip through the writer.
  std::vector<tt::TensorToWrite> to_write;
  for (const tt::TensorView& t : tensors)
    to_write.push_back({t.name, t.dtype, t.shape, t.data});
  const absl::StatusOr<std::string> bytes =
      tt::SerializeSafetensors(to_write, file.metadata());
  if (!bytes.ok()) {
    // Only names the writer refuses on purpose; the reader takes any string.
    Check(absl::IsInvalidArgument(bytes.status()), "writer failed unexpectedly",
          bytes.status().ToString());
    return;
  }
  tt::SafetensorsFile::Options options;
  options.max_header_bytes = int64_t{1} << 30;
  const absl::StatusOr<std::unique_ptr<tt::SafetensorsFile>> again =
      tt::SafetensorsFile::FromBytes(*bytes, options);
  Check(again.ok(), "a written file does not read back", again.status().ToString());
  Check((*again)->metadata() == file.metadata(), "metadata changed in the round trip");
  Check((*again)->tensors().size() == tensors.size(),
        "tensor count changed in the round trip");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const tt::TensorView& a = tensors[i];
    const tt::TensorView& b = (*again)->tensors()[i];
    Check(
        a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data == b.data,
        "tensor changed in the round trip", a.name);
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  namespace tt = ::tessera::trainer;
  tt::SafetensorsFile::Options options;
  options.max_header_bytes = kMaxHeader;
  const absl::StatusOr<std::unique_ptr<tt::SafetensorsFile>> file =
      tt::SafetensorsFile::FromBytes(
          std::string(reinterpret_cast<const char*>(data), size), options);
  CheckOnlyBadData(file.status(), "SafetensorsFile::FromBytes: unexpected code");
  if (!file.ok()) return 0;
  const absl::string_view bytes = (*file)->bytes();
  Check(bytes.size() == size && std::memcmp(bytes.data(), data, size) == 0,
        "the file's bytes differ from the input");
  CheckAccepted(**file, bytes.data(), bytes.size());
  return 0;
}
