#include "worker/trainer/run/zero_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera::trainer {
namespace {

// Format 1: a LibTorch archive per rank, read whole.
constexpr int64_t kLegacyFormat = 1;

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

// One piece of a format-1 file as read back.
struct ReadPiece {
  int64_t offset = 0;
  FlatParamState state;
};

// The pieces of one shard file into `by_param`.
void ReadShard(torch::serialize::InputArchive& archive, int expected_rank,
               int writer_world, std::vector<std::vector<ReadPiece>>& by_param) {
  TORCH_CHECK(ReadInt(archive, "format") == kLegacyFormat, "unknown format version");
  TORCH_CHECK(ReadInt(archive, "rank") == expected_rank &&
                  ReadInt(archive, "world_size") == writer_world,
              "written as another rank or world size");
  const int64_t count = ReadInt(archive, "pieces");
  for (int64_t j = 0; j < count; ++j) {
    const std::string prefix = absl::StrCat("piece", j, ".");
    const int64_t param = ReadInt(archive, prefix + "param");
    TORCH_CHECK(param >= 0 && param < static_cast<int64_t>(by_param.size()),
                "a piece of parameter ", param, " of a model with ", by_param.size());
    ReadPiece piece;
    piece.offset = ReadInt(archive, prefix + "offset");
    piece.state.step = ReadInt(archive, prefix + "step");
    c10::IValue names;
    archive.read(prefix + "names", names);
    for (const absl::string_view name :
         absl::StrSplit(names.toStringRef(), ',', absl::SkipEmpty())) {
      torch::Tensor tensor;
      archive.read(absl::StrCat(prefix, "t.", name), tensor, /*is_buffer=*/true);
      piece.state.tensors.emplace_back(std::string(name), tensor.reshape({-1}));
    }
    by_param[static_cast<size_t>(param)].push_back(std::move(piece));
  }
}

// One parameter's pieces joined, in offset order; they must cover [0, numel).
std::optional<FlatParamState> Join(std::vector<ReadPiece>& pieces, int64_t numel,
                                   int param) {
  if (pieces.empty()) return std::nullopt;
  std::sort(pieces.begin(), pieces.end(),
            [](const ReadPiece& a, const ReadPiece& b) { return a.offset < b.offset; });
  FlatParamState whole;
  whole.step = pieces.front().state.step;
  int64_t covered = 0;
  for (const ReadPiece& piece : pieces) {
    TORCH_CHECK(piece.offset == covered, "parameter ", param, "'s pieces leave a gap at ",
                covered);
    TORCH_CHECK(piece.state.tensors.size() == pieces.front().state.tensors.size(),
                "parameter ", param, "'s pieces hold different state");
    covered += piece.state.tensors.empty() ? 0 : piece.state.tensors[0].second.numel();
  }
  TORCH_CHECK(covered == numel, "parameter ", param, "'s pieces cover ", covered, " of ",
              numel, " elements");
  for (size_t t = 0; t < pieces.front().state.tensors.size(); ++t) {
    std::vector<torch::Tensor> parts;
    for (const ReadPiece& piece : pieces) parts.push_back(piece.state.tensors[t].second);
    whole.tensors.emplace_back(pieces.front().state.tensors[t].first, torch::cat(parts));
  }
  return whole;
}

constexpr int64_t kShardFormat = 2;
constexpr char kMagic[9] = "TSZSHARD";
constexpr int64_t kDataAlignment = 64;
// A header is a few hundred bytes per piece; anything larger is not a header.
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

std::string LegacyShardPath(const CheckpointDirectory& dir, int64_t step, int rank) {
  return absl::StrCat(dir.StepDir(step),
                      absl::StrFormat("/optimizer-rank-%05d.pt", rank));
}

// The model a shard was written for: its parameters' element counts.
nlohmann::json ModelOf(const std::vector<int64_t>& numels) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the counts' bytes
  int64_t elements = 0;
  for (const int64_t n : numels) {
    elements += n;
    for (int b = 0; b < 8; ++b) {
      hash ^= static_cast<uint64_t>(n) >> (8 * b) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return {{"parameters", numels.size()},
          {"elements", elements},
          {"layout", absl::StrFormat("%016x", hash)}};
}

std::optional<torch::ScalarType> DtypeNamed(const std::string& name) {
  for (const torch::ScalarType t :
       {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16}) {
    if (name == c10::toString(t)) return t;
  }
  return std::nullopt;
}

uint64_t LittleEndian64(const unsigned char* bytes) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = v << 8 | bytes[b];
  return v;
}

// One format-2 shard file: its header read, its tensors read by byte range.
class ShardReader {
 public:
  static absl::StatusOr<ShardReader> Open(const std::string& path) {
    ASSIGN_OR_RETURN(RandomAccessFile file, RandomAccessFile::Open(path));
    std::array<unsigned char, 16> start{};
    RETURN_IF_ERROR(file.ReadExactly(0, start.size(), start.data()));
    if (std::memcmp(start.data(), kMagic, 8) != 0) {
      return absl::DataLossError(absl::StrCat(path, " is not a tessera optimizer shard"));
    }
    const uint64_t length = LittleEndian64(start.data() + 8);
    if (length > kMaxHeaderBytes) {
      return absl::DataLossError(absl::StrCat(path, ": a header of ", length, " bytes"));
    }
    std::string text(length, '\0');
    RETURN_IF_ERROR(file.ReadExactly(16, text.size(), text.data()));
    ShardReader reader(std::move(file));
    try {
      reader.header_ = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(path, ": its header: ", e.what()));
    }
    reader.data_start_ = (16 + static_cast<int64_t>(length) + kDataAlignment - 1) /
                         kDataAlignment * kDataAlignment;
    return reader;
  }

  const nlohmann::json& header() const { return header_; }
  const std::string& path() const { return file_.path(); }

  // `bytes` bytes at `at` of the data section into `dst`.
  absl::Status ReadData(void* dst, size_t bytes, int64_t at) {
    return file_.ReadExactly(data_start_ + at, bytes, dst);
  }

 private:
  explicit ShardReader(RandomAccessFile file) : file_(std::move(file)) {}

  RandomAccessFile file_;
  nlohmann::json header_;
  int64_t data_start_ = 0;
};

// The parameters' states over their wanted ranges as the files are read:
// the ranges each piece filled, to check that they tile the wanted range.
struct Gathered {
  std::vector<std::optional<FlatParamState>> states;
  std::vector<std::vector<ElementRange>> filled;
};

// The wanted part of one piece (`piece` of the header) into `gathered`.
absl::Status ReadWantedPart(ShardReader& reader, const nlohmann::json& piece,
                            const std::vector<int64_t>& numels,
                            const std::vector<ElementRange>& wanted, Gathered& gathered) {
  const int64_t param = piece.at("param").get<int64_t>();
  const int64_t offset = piece.at("offset").get<int64_t>();
  const int64_t numel = piece.at("numel").get<int64_t>();
  if (param < 0 || param >= static_cast<int64_t>(numels.size()) || offset < 0 ||
      numel < 0 || offset + numel > numels[static_cast<size_t>(param)]) {
    return absl::DataLossError(absl::StrCat(reader.path(), ": a piece of ", numel,
                                            " elements at ", offset, " of parameter ",
                                            param, ", which this model does not have"));
  }
  const ElementRange want = wanted[static_cast<size_t>(param)];
  const ElementRange overlap{std::max(offset, want.begin),
                             std::min(offset + numel, want.end)};
  if (overlap.size() <= 0) return absl::OkStatus();
  std::optional<FlatParamState>& state = gathered.states[static_cast<size_t>(param)];
  const nlohmann::json& tensors = piece.at("tensors");
  if (!state.has_value()) {
    state.emplace();
    state->step = piece.at("step").get<int64_t>();
    for (const nlohmann::json& t : tensors) {
      const std::optional<torch::ScalarType> dtype = DtypeNamed(t.at("dtype"));
      if (!dtype.has_value()) {
        return absl::DataLossError(
            absl::StrCat(reader.path(), ": a tensor of dtype ", t.at("dtype").dump()));
      }
      state->tensors.emplace_back(t.at("name").get<std::string>(),
                                  torch::empty({want.size()}, *dtype));
    }
  }
  if (tensors.size() != state->tensors.size()) {
    return absl::DataLossError(absl::StrCat(reader.path(), ": parameter ", param,
                                            "'s pieces hold different state"));
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    torch::Tensor& dst = state->tensors[k].second;
    if (tensors[k].at("name") != state->tensors[k].first ||
        DtypeNamed(tensors[k].at("dtype")) != dst.scalar_type()) {
      return absl::DataLossError(absl::StrCat(reader.path(), ": parameter ", param,
                                              "'s pieces hold different state"));
    }
    const auto size = static_cast<int64_t>(dst.element_size());
    RETURN_IF_ERROR(reader.ReadData(
        static_cast<char*>(dst.data_ptr()) + (overlap.begin - want.begin) * size,
        static_cast<size_t>(overlap.size() * size),
        tensors[k].at("at").get<int64_t>() + (overlap.begin - offset) * size));
  }
  gathered.filled[static_cast<size_t>(param)].push_back(overlap);
  return absl::OkStatus();
}

// Reads the wanted ranges from rank `rank`'s file into `gathered`.
absl::Status ReadShardFile(const std::string& path, int rank, int writer_world,
                           const std::vector<int64_t>& numels,
                           const std::vector<ElementRange>& wanted, Gathered& gathered) {
  ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(path));
  try {
    const nlohmann::json& header = reader.header();
    if (header.at("format").get<int64_t>() != kShardFormat) {
      return absl::DataLossError(
          absl::StrCat(path, ": unknown format ", header.at("format").dump()));
    }
    if (header.at("rank").get<int64_t>() != rank ||
        header.at("world_size").get<int64_t>() != writer_world) {
      return absl::DataLossError(
          absl::StrCat(path, ": written as another rank or world size (rank ",
                       header.at("rank").dump(), " of ", header.at("world_size").dump(),
                       "; expected rank ", rank, " of ", writer_world, ")"));
    }
    const nlohmann::json model = ModelOf(numels);
    const nlohmann::json& written = header.at("model");
    if (written != model) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " holds the optimizer state of another model: ",
          written.at("parameters").dump(), " parameters of ",
          written.at("elements").dump(), " elements (layout ",
          written.at("layout").get<std::string>(), "), where this model has ",
          model.at("parameters").dump(), " of ", model.at("elements").dump(), " (layout ",
          model.at("layout").get<std::string>(), ")"));
    }
    for (const nlohmann::json& piece : header.at("pieces")) {
      RETURN_IF_ERROR(ReadWantedPart(reader, piece, numels, wanted, gathered));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": its header: ", e.what()));
  }
  return absl::OkStatus();
}

// Each read parameter's pieces must tile its wanted range.
absl::Status CheckCovered(const Gathered& gathered,
                          const std::vector<ElementRange>& wanted,
                          const std::string& where) {
  for (size_t i = 0; i < gathered.states.size(); ++i) {
    if (!gathered.states[i].has_value()) continue;
    std::vector<ElementRange> filled = gathered.filled[i];
    std::sort(
        filled.begin(), filled.end(),
        [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
    int64_t next = wanted[i].begin;
    for (const ElementRange& r : filled) {
      if (r.begin != next) {
        return absl::DataLossError(
            absl::StrCat(where, ": parameter ", i, "'s pieces ",
                         r.begin < next ? "overlap" : "leave a gap", " at element ",
                         std::min(r.begin, next)));
      }
      next = r.end;
    }
    if (next != wanted[i].end) {
      return absl::DataLossError(absl::StrCat(
          where, ": parameter ", i, "'s pieces cover ", next - wanted[i].begin,
          " of the ", wanted[i].size(), " elements needed"));
    }
  }
  return absl::OkStatus();
}

// A format-1 checkpoint: every file read whole, each parameter joined, then
// cut to its wanted range.
absl::StatusOr<std::vector<std::optional<FlatParamState>>> LoadLegacyShards(
    const CheckpointDirectory& dir, int64_t step, int writer_world,
    const std::vector<int64_t>& numels, const std::vector<ElementRange>& wanted) {
  std::vector<std::vector<ReadPiece>> by_param(numels.size());
  for (int rank = 0; rank < writer_world; ++rank) {
    const std::string path = LegacyShardPath(dir, step, rank);
    ASSIGN_OR_RETURN(const std::string bytes,
                     tessera::ReadFile(path, kMaxCheckpointFileBytes));
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
      ReadShard(archive, rank, writer_world, by_param);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat("reading ", path, ": ", e.what()));
    }
  }
  std::vector<std::optional<FlatParamState>> states(numels.size());
  try {
    for (size_t i = 0; i < numels.size(); ++i) {
      std::optional<FlatParamState> whole =
          Join(by_param[i], numels[i], static_cast<int>(i));
      if (!whole.has_value() || wanted[i].size() <= 0) continue;
      for (auto& [name, tensor] : whole->tensors) {
        tensor = tensor.narrow(0, wanted[i].begin, wanted[i].size()).clone();
      }
      states[i] = std::move(whole);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", dir.StepDir(step),
                                            ": the optimizer shards: ", e.what()));
  }
  return states;
}

}  // namespace

std::string ZeroShardPath(const CheckpointDirectory& dir, int64_t step, int rank) {
  return absl::StrCat(dir.StepDir(step),
                      absl::StrFormat("/optimizer-rank-%05d.shard", rank));
}

absl::StatusOr<std::pair<std::string, std::string>> SerializeZeroShard(
    const CheckpointDirectory& dir, int64_t step, int rank, int world_size,
    const std::vector<ZeroPieceState>& pieces, const std::vector<int64_t>& numels) {
  nlohmann::json listed = nlohmann::json::array();
  std::vector<torch::Tensor> data;
  int64_t at = 0;
  for (const ZeroPieceState& piece : pieces) {
    nlohmann::json tensors = nlohmann::json::array();
    int64_t numel = 0;
    for (const auto& [name, tensor] : piece.state.tensors) {
      torch::Tensor t = tensor.to(torch::kCPU).contiguous();
      if (!DtypeNamed(c10::toString(t.scalar_type())).has_value()) {
        return absl::InternalError(absl::StrCat("an optimizer state tensor of dtype ",
                                                c10::toString(t.scalar_type())));
      }
      tensors.push_back(
          {{"name", name}, {"dtype", c10::toString(t.scalar_type())}, {"at", at}});
      at += static_cast<int64_t>(t.nbytes());
      numel = t.numel();
      data.push_back(std::move(t));
    }
    listed.push_back({{"param", piece.param},
                      {"offset", piece.param_offset},
                      {"numel", numel},
                      {"step", piece.state.step},
                      {"tensors", std::move(tensors)}});
  }
  const std::string header =
      nlohmann::json{{"format", kShardFormat},   {"rank", rank},
                     {"world_size", world_size}, {"step", step},
                     {"model", ModelOf(numels)}, {"pieces", std::move(listed)}}
          .dump();
  const int64_t data_start =
      (16 + static_cast<int64_t>(header.size()) + kDataAlignment - 1) / kDataAlignment *
      kDataAlignment;
  std::string bytes(kMagic, 8);
  for (int b = 0; b < 8; ++b) {
    bytes.push_back(static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * b)));
  }
  bytes += header;
  bytes.resize(static_cast<size_t>(data_start), '\0');
  bytes.reserve(static_cast<size_t>(data_start + at));
  for (const torch::Tensor& t : data) {
    bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return std::make_pair(ZeroShardPath(dir, step, rank), std::move(bytes));
}

absl::StatusOr<std::vector<std::optional<FlatParamState>>> LoadZeroShards(
    const CheckpointDirectory& dir, int64_t step, int writer_world,
    const std::vector<int64_t>& numels, const std::vector<ElementRange>& wanted) {
  if (!std::filesystem::exists(ZeroShardPath(dir, step, 0)) &&
      std::filesystem::exists(LegacyShardPath(dir, step, 0))) {
    return LoadLegacyShards(dir, step, writer_world, numels, wanted);
  }
  Gathered gathered;
  gathered.states.resize(numels.size());
  gathered.filled.resize(numels.size());
  for (int rank = 0; rank < writer_world; ++rank) {
    RETURN_IF_ERROR(ReadShardFile(ZeroShardPath(dir, step, rank), rank, writer_world,
                                  numels, wanted, gathered));
  }
  RETURN_IF_ERROR(CheckCovered(
      gathered, wanted,
      absl::StrCat("checkpoint ", dir.StepDir(step), ": the optimizer shards")));
  return std::move(gathered.states);
}

}  // namespace tessera::trainer
