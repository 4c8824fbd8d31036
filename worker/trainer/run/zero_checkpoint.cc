#include "worker/trainer/run/zero_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace tessera::trainer {
namespace {

constexpr int64_t kShardFormat = 1;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading ", path));
  return contents.str();
}

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

// One piece as read back.
struct ReadPiece {
  int64_t offset = 0;
  FlatParamState state;
};

// The pieces of one shard file into `by_param`.
void ReadShard(torch::serialize::InputArchive& archive, int expected_rank,
               int writer_world, std::vector<std::vector<ReadPiece>>& by_param) {
  TORCH_CHECK(ReadInt(archive, "format") == kShardFormat, "unknown format version");
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

}  // namespace

std::string ZeroShardPath(const CheckpointDirectory& dir, int64_t step, int rank) {
  return absl::StrCat(dir.StepDir(step),
                      absl::StrFormat("/optimizer-rank-%05d.pt", rank));
}

absl::StatusOr<std::pair<std::string, std::string>> SerializeZeroShard(
    const CheckpointDirectory& dir, int64_t step, int rank, int world_size,
    const std::vector<ZeroPieceState>& pieces) {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(kShardFormat));
    archive.write("rank", c10::IValue(static_cast<int64_t>(rank)));
    archive.write("world_size", c10::IValue(static_cast<int64_t>(world_size)));
    archive.write("step", c10::IValue(step));
    archive.write("pieces", c10::IValue(static_cast<int64_t>(pieces.size())));
    for (size_t j = 0; j < pieces.size(); ++j) {
      const ZeroPieceState& piece = pieces[j];
      const std::string prefix = absl::StrCat("piece", j, ".");
      archive.write(prefix + "param", c10::IValue(static_cast<int64_t>(piece.param)));
      archive.write(prefix + "offset", c10::IValue(piece.param_offset));
      archive.write(prefix + "step", c10::IValue(piece.state.step));
      std::vector<std::string> names;
      for (const auto& [name, tensor] : piece.state.tensors) {
        names.push_back(name);
        archive.write(absl::StrCat(prefix, "t.", name), tensor, /*is_buffer=*/true);
      }
      archive.write(prefix + "names", c10::IValue(absl::StrJoin(names, ",")));
    }
    std::string bytes;
    archive.save_to([&bytes](const void* data, size_t size) -> size_t {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
    return std::make_pair(ZeroShardPath(dir, step, rank), std::move(bytes));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(
        "serialising the optimizer shard of checkpoint ", step, ": ", e.what()));
  }
}

absl::StatusOr<std::vector<std::optional<FlatParamState>>> LoadZeroShards(
    const CheckpointDirectory& dir, int64_t step, int writer_world,
    const std::vector<int64_t>& numels) {
  std::vector<std::vector<ReadPiece>> by_param(numels.size());
  for (int rank = 0; rank < writer_world; ++rank) {
    const std::string path = ZeroShardPath(dir, step, rank);
    ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(path));
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
      ReadShard(archive, rank, writer_world, by_param);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat("reading ", path, ": ", e.what()));
    }
  }
  std::vector<std::optional<FlatParamState>> whole(numels.size());
  try {
    for (size_t i = 0; i < numels.size(); ++i) {
      whole[i] = Join(by_param[i], numels[i], static_cast<int>(i));
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", dir.StepDir(step),
                                            ": the optimizer shards: ", e.what()));
  }
  return whole;
}

}  // namespace tessera::trainer
