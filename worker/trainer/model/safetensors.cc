#include "worker/trainer/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera::trainer {
namespace {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors data is little endian; a big-endian host would need byte swaps");

struct DtypeInfo {
  SafetensorsDtype dtype;
  absl::string_view name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1}, {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},     {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},   {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},   {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},   {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthBytes = 8;

float HalfToFloat(uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exactly representable in float.
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return negative ? -value : value;
  }
  uint32_t bits = negative ? 0x80000000u : 0u;
  if (exponent == 31) {
    bits |= 0x7f800000u | (mantissa << 13);  // infinity or NaN (payload kept)
  } else {
    bits |= ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

template <typename T>
T LoadUnaligned(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A non-negative JSON integer, or nullopt (negative, fractional, other types).
std::optional<uint64_t> AsUnsigned(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", what));
}

absl::Status BadTensor(absl::string_view name, absl::string_view what) {
  return Corrupt(absl::StrCat("tensor \"", absl::CEscape(name), "\": ", what));
}

// Parses the header text, refusing an object with a repeated key at any level
// (nlohmann's parser would silently keep the last one).
absl::StatusOr<nlohmann::json> ParseHeaderJson(absl::string_view text) {
  std::vector<std::set<std::string>> keys;  // one per open object
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                      nlohmann::json& parsed) {
    switch (event) {
      case nlohmann::json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case nlohmann::json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case nlohmann::json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  nlohmann::json header = nlohmann::json::parse(text.begin(), text.end(), callback,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return Corrupt("the header is not valid JSON");
  if (!duplicate.empty()) {
    return Corrupt(absl::StrCat("the header names \"", absl::CEscape(duplicate),
                                "\" more than once (duplicate name)"));
  }
  if (!header.is_object()) return Corrupt("the header is not a JSON object");
  return header;
}

struct ByteRange {
  uint64_t begin;
  uint64_t end;
  size_t tensor;  // index into the tensor list
};

}  // namespace

absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  return Info(dtype).name;
}

size_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).size; }

absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: unknown dtype \"", absl::CEscape(name), "\""));
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<float>> TensorToFloat32(const TensorView& tensor) {
  const size_t n = tensor.data.size() / SafetensorsDtypeSize(tensor.dtype);
  std::vector<float> out(n);
  const char* p = tensor.data.data();
  switch (tensor.dtype) {
    case SafetensorsDtype::kF32:
      if (n > 0) std::memcpy(out.data(), p, n * sizeof(float));
      break;
    case SafetensorsDtype::kF64:
      for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<float>(LoadUnaligned<double>(p + 8 * i));
      break;
    case SafetensorsDtype::kF16:
      for (size_t i = 0; i < n; ++i)
        out[i] = HalfToFloat(LoadUnaligned<uint16_t>(p + 2 * i));
      break;
    case SafetensorsDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        out[i] = std::bit_cast<float>(uint32_t{LoadUnaligned<uint16_t>(p + 2 * i)} << 16);
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor \"", tensor.name, "\" has dtype ",
          SafetensorsDtypeName(tensor.dtype), ", not a floating-point type"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path, const Options& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message =
        absl::StrCat("safetensors: cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", path, " is not a regular file"));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (mapping == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat("safetensors: cannot map ", path, ": ", std::strerror(err)));
    }
    file->mapping_ = mapping;
    file->mapping_size_ = size;
    file->bytes_ = absl::string_view(static_cast<const char*>(mapping), size);
  } else {
    ::close(fd);
  }
  const absl::Status status = file->Parse(options);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string bytes, const Options& options) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->buffer_ = std::move(bytes);
  file->bytes_ = file->buffer_;
  RETURN_IF_ERROR(file->Parse(options));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  const auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorView& t, absl::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

namespace {

// The header's length from the 8-byte prefix: within the file and the limit.
absl::StatusOr<uint64_t> ReadHeaderLength(absl::string_view bytes,
                                          int64_t max_header_bytes) {
  if (bytes.size() < kLengthBytes) {
    return Corrupt(absl::StrCat("truncated: ", bytes.size(),
                                " bytes, less than the 8-byte header length"));
  }
  const auto header_length = LoadUnaligned<uint64_t>(bytes.data());
  if (header_length > static_cast<uint64_t>(max_header_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: header length ", header_length,
                     " bytes is past the limit of ", max_header_bytes, " bytes"));
  }
  if (header_length > bytes.size() - kLengthBytes) {
    return Corrupt(absl::StrCat("truncated: header length ", header_length,
                                " bytes is past the end of the file (", bytes.size(),
                                " bytes)"));
  }
  return header_length;
}

// The __metadata__ entry: an object whose values are strings.
absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(
    const nlohmann::json& entry) {
  if (!entry.is_object()) return Corrupt("__metadata__ is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return Corrupt(absl::StrCat("__metadata__ value of \"", absl::CEscape(key),
                                  "\" is not a string"));
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// A tensor's shape and its element count; `overflow` when the count does not
// fit in 64 bits.
struct Shape {
  std::vector<int64_t> dims;
  uint64_t elements = 1;
  bool overflow = false;
};

absl::StatusOr<Shape> ParseShape(absl::string_view name, const nlohmann::json& json) {
  if (!json.is_array()) return BadTensor(name, "shape is not an array");
  Shape shape;
  for (const nlohmann::json& d : json) {
    const std::optional<uint64_t> dim = AsUnsigned(d);
    if (!dim || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadTensor(name, "shape holds something other than a non-negative integer");
    }
    shape.dims.push_back(static_cast<int64_t>(*dim));
    if (*dim != 0 && shape.elements > std::numeric_limits<uint64_t>::max() / *dim)
      shape.overflow = true;
    shape.elements *= *dim;
  }
  return shape;
}

// data_offsets: a pair [begin, end) within the `data_size` bytes of data.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseOffsets(absl::string_view name,
                                                           const nlohmann::json& json,
                                                           uint64_t data_size) {
  if (!json.is_array() || json.size() != 2) {
    return BadTensor(name, "data_offsets is not a pair [begin, end]");
  }
  const std::optional<uint64_t> begin = AsUnsigned(json[0]);
  const std::optional<uint64_t> end = AsUnsigned(json[1]);
  if (!begin || !end)
    return BadTensor(name, "data_offsets are not non-negative integers");
  if (*begin > *end || *end > data_size) {
    return BadTensor(
        name, absl::StrCat("data_offsets [", *begin, ", ", *end,
                           ") are out of range of the ", data_size, " data bytes"));
  }
  return std::pair{*begin, *end};
}

// One tensor's header entry, checked against the data section `data`.
struct ParsedTensor {
  TensorView view;
  uint64_t begin;
  uint64_t end;
};

absl::StatusOr<ParsedTensor> ParseTensorEntry(const std::string& name,
                                              const nlohmann::json& entry,
                                              absl::string_view data) {
  if (!entry.is_object()) return BadTensor(name, "its entry is not a JSON object");
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || shape_it == entry.end() || offsets_it == entry.end()) {
    return BadTensor(name, "needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  if (!dtype_it->is_string()) return BadTensor(name, "dtype is not a string");
  const absl::StatusOr<SafetensorsDtype> dtype =
      ParseSafetensorsDtype(dtype_it->get<std::string>());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: tensor \"", absl::CEscape(name), "\": unknown dtype \"",
        absl::CEscape(dtype_it->get<std::string>()), "\""));
  }
  ASSIGN_OR_RETURN(Shape shape, ParseShape(name, *shape_it));
  ASSIGN_OR_RETURN(const auto offsets, ParseOffsets(name, *offsets_it, data.size()));
  const auto [begin, end] = offsets;
  // An element count past bytes / element_size cannot match (and its
  // product with the size could wrap), so it is refused before multiplying.
  const size_t element_size = SafetensorsDtypeSize(*dtype);
  const uint64_t bytes = end - begin;
  if (shape.overflow || shape.elements > bytes / element_size ||
      shape.elements * element_size != bytes) {
    return BadTensor(
        name, absl::StrCat("shape [", absl::StrJoin(shape.dims, ", "), "] of ",
                           SafetensorsDtypeName(*dtype), " does not match its ", bytes,
                           " bytes (shape/size mismatch)"));
  }
  ParsedTensor tensor;
  tensor.begin = begin;
  tensor.end = end;
  tensor.view.name = name;
  tensor.view.dtype = *dtype;
  tensor.view.shape = std::move(shape.dims);
  tensor.view.data = data.substr(begin, end - begin);
  return tensor;
}

// The ranges must tile the data: sorted, each starts where the last ended.
absl::Status CheckRangesTileData(std::vector<ByteRange> ranges,
                                 const std::vector<TensorView>& tensors,
                                 uint64_t data_size) {
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const TensorView* previous = nullptr;
  for (const ByteRange& range : ranges) {
    const TensorView& tensor = tensors[range.tensor];
    if (range.begin < covered) {
      return BadTensor(tensor.name, absl::StrCat("data_offsets [", range.begin, ", ",
                                                 range.end, ") overlap tensor \"",
                                                 absl::CEscape(previous->name), "\""));
    }
    if (range.begin > covered) {
      return BadTensor(
          tensor.name,
          absl::StrCat("data_offsets [", range.begin, ", ", range.end,
                       ") leave a gap of ", range.begin - covered, " bytes before them"));
    }
    covered = range.end;
    previous = &tensor;
  }
  if (covered != data_size) {
    return Corrupt(absl::StrCat("the tensors cover ", covered, " of the ", data_size,
                                " data bytes (bad offsets or trailing bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SafetensorsFile::Parse(const Options& options) {
  ASSIGN_OR_RETURN(const uint64_t header_length,
                   ReadHeaderLength(bytes_, options.max_header_bytes));
  const absl::string_view header_text = bytes_.substr(kLengthBytes, header_length);
  const absl::string_view data = bytes_.substr(kLengthBytes + header_length);
  ASSIGN_OR_RETURN(const nlohmann::json header, ParseHeaderJson(header_text));

  std::vector<ByteRange> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      ASSIGN_OR_RETURN(metadata_, ParseMetadata(entry));
      continue;
    }
    ASSIGN_OR_RETURN(ParsedTensor tensor, ParseTensorEntry(name, entry, data));
    ranges.push_back({tensor.begin, tensor.end, tensors_.size()});
    tensors_.push_back(std::move(tensor.view));
  }
  RETURN_IF_ERROR(CheckRangesTileData(std::move(ranges), tensors_, data.size()));
  // header.items() iterates in key order, so tensors_ is sorted by name.
  return absl::OkStatus();
}

namespace {

// The length prefix and the padded header of a file holding `tensors` in order.
absl::StatusOr<std::string> EncodeHeader(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::set<absl::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: cannot write a tensor named \"", tensor.name, "\""));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor \"", tensor.name, "\" is given twice"));
    }
    uint64_t elements = 1;
    for (const int64_t d : tensor.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "safetensors: tensor \"", tensor.name, "\" has a negative dimension"));
      }
      elements *= static_cast<uint64_t>(d);
    }
    if (elements * SafetensorsDtypeSize(tensor.dtype) != tensor.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor \"", tensor.name, "\" has ", tensor.data.size(),
          " bytes; its shape [", absl::StrJoin(tensor.shape, ", "), "] of ",
          SafetensorsDtypeName(tensor.dtype), " needs ",
          elements * SafetensorsDtypeSize(tensor.dtype)));
    }
    header[tensor.name] = {{"dtype", std::string(SafetensorsDtypeName(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.data.size()}}};
    offset += tensor.data.size();
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // dump() refuses strings that are not UTF-8 (a name or a metadata value).
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: cannot encode the header: ", e.what()));
  }
  // Spaces up to a multiple of 8, so the data starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t length = header_text.size();
  std::string out(reinterpret_cast<const char*>(&length), kLengthBytes);
  out.append(header_text);
  return out;
}

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string out, EncodeHeader(tensors, metadata));
  for (const TensorToWrite& tensor : tensors)
    out.append(tensor.data.data(), tensor.data.size());
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // The header, then each tensor's bytes straight from the caller's memory: no
  // second copy of the weights.
  ASSIGN_OR_RETURN(const std::string header, EncodeHeader(tensors, metadata));
  std::vector<std::string_view> parts = {header};
  for (const TensorToWrite& tensor : tensors) {
    parts.emplace_back(tensor.data.data(), tensor.data.size());
  }
  return WriteFileAtomicallyFromParts(path, parts);
}

}  // namespace tessera::trainer
