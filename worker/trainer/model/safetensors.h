// The safetensors file format (https://huggingface.co/docs/safetensors), read and
// written without LibTorch:
//
//   8 bytes   N, the header length (unsigned, little endian)
//   N bytes   a JSON object: for each tensor name {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, and optionally "__metadata__", a
//             map of strings to strings; the writer pads it with spaces to a
//             multiple of 8 bytes, as Python's safetensors does
//   the rest  the tensors' bytes, little endian, row-major; each tensor's
//             [begin, end) is relative to the start of this part, and together
//             the ranges cover it exactly, without gaps or overlaps
//
// SafetensorsFile::Open memory-maps a file read-only and checks the whole header
// before it returns: a file it accepts has only known dtypes, unique names, and
// byte ranges that match their shapes and tile the data. Errors name the
// problem and the tensor: DataLoss when the bytes are not a well-formed file
// (truncated, bad JSON, offsets out of range, overlapping or leaving gaps,
// duplicate names, a shape that does not match its byte range), InvalidArgument
// when they are well-formed but outside what is supported (a header past
// Options::max_header_bytes, an unknown dtype).
//
// A SafetensorsFile is immutable after construction and may be read from any
// number of threads; the TensorView data it hands out lives as long as it does.
#ifndef TESSERA_WORKER_TRAINER_MODEL_SAFETENSORS_H_
#define TESSERA_WORKER_TRAINER_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::trainer {

// The element types of the format (named as in the header: "F32", "BF16", ...).
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// "F32", "BF16", ...
absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
// The dtype called `name` (case-sensitive, as the format spells it), or
// InvalidArgument naming it.
absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name);
// Bytes per element.
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);

// One tensor of a file: its bytes point into the file's mapping (or buffer).
// They need not be aligned for the element type.
struct TensorView {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  absl::string_view data;

  int64_t num_elements() const;
};

// The tensor's values as float32: exact for F32, F16 and BF16, rounded to
// nearest for F64. InvalidArgument for the integer and bool dtypes.
absl::StatusOr<std::vector<float>> TensorToFloat32(const TensorView& tensor);

class SafetensorsFile {
 public:
  struct Options {
    // Largest header accepted (Python's safetensors refuses past 100 MB too).
    int64_t max_header_bytes = int64_t{100} << 20;
  };

  // Maps and checks the file at `path`. NotFound when it does not exist.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                               const Options& options);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path) {
    return Open(path, Options());
  }
  // Checks a file held in memory (the fuzzer's entry); the file keeps `bytes`.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(
      std::string bytes, const Options& options);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string bytes) {
    return FromBytes(std::move(bytes), Options());
  }

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // Every tensor, sorted by name.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const TensorView* Find(absl::string_view name) const;
  // The "__metadata__" map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The whole file (length, header and data), which the views point into.
  absl::string_view bytes() const { return bytes_; }

 private:
  SafetensorsFile() = default;
  // Parses and checks the header over bytes_ (set by the factories).
  absl::Status Parse(const Options& options);

  // Exactly one of the two holds the file: a read-only mapping, or a buffer.
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::string buffer_;
  absl::string_view bytes_;  // the whole file

  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` holds num_elements * dtype size bytes, little
// endian, row-major.
struct TensorToWrite {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  absl::string_view data;
};

// The file's bytes, tensors in the order given. InvalidArgument for an empty or
// duplicate name, the name "__metadata__", or data whose size does not match
// the shape.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata);

// Writes SerializeSafetensors' bytes to `path` atomically and durably
// (WriteFileAtomically, common/file_io.h), so a reader never sees half a file.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_SAFETENSORS_H_
