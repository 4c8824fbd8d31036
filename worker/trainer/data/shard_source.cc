#include "worker/trainer/data/shard_source.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/tar_reader.h"

namespace tessera::trainer::data {
namespace {

bool IsImageMember(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

std::string KeyOf(const std::string& member) {
  const size_t dot = member.rfind('.');
  return dot == std::string::npos ? member : member.substr(0, dot);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardSource>> ShardSource::Open(const std::string& root,
                                                               const std::string& split) {
  ASSIGN_OR_RETURN(const ShardIndex index, ReadShardIndex(root));
  auto it = index.splits.find(split);
  if (it == index.splits.end() || it->second.empty()) {
    return absl::NotFoundError(absl::StrCat(
        root, "/", kShardIndexFile, " lists no shards for the '", split, "' split"));
  }
  auto source = std::unique_ptr<ShardSource>(new ShardSource());
  source->classes_ = index.classes;
  for (const ShardFile& f : it->second) source->shards_.push_back(root + "/" + f.file);
  for (int32_t s = 0; s < static_cast<int32_t>(source->shards_.size()); ++s) {
    RETURN_IF_ERROR(source->AddShard(s));
  }
  if (source->samples_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the '", split, "' shards under ", root, " hold no images"));
  }
  return source;
}

absl::Status ShardSource::AddShard(int32_t shard) {
  const std::string& path = shards_[shard];
  ASSIGN_OR_RETURN(std::unique_ptr<TarReader> reader, TarReader::OpenFile(path));
  std::map<std::string, Sample> images;   // by key, waiting for their .cls
  std::map<std::string, int64_t> labels;  // by key
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<TarMember> m, reader->Next(/*read_data=*/false));
    if (!m.has_value()) break;
    if (IsImageMember(m->name)) {
      images[KeyOf(m->name)] = Sample{shard, m->name, m->data_offset, m->size, -1};
    } else if (absl::EndsWith(m->name, ".cls") && m->size <= 32) {
      ASSIGN_OR_RETURN(const std::string bytes,
                       ReadRange(shard, m->data_offset, m->size));
      int64_t label = -1;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(bytes), &label) || label < 0 ||
          label >= static_cast<int64_t>(classes_.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", m->name, ": not a class index in [0, ", classes_.size(), ")"));
      }
      labels[KeyOf(m->name)] = label;
    }
  }
  for (auto& [key, sample] : images) {
    auto label = labels.find(key);
    if (label == labels.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", sample.member, " has no ", key, ".cls"));
    }
    sample.label = label->second;
    samples_.push_back(std::move(sample));
  }
  return absl::OkStatus();
}

std::string ShardSource::name(int64_t index) const {
  const Sample& s = samples_[index];
  return absl::StrCat(shards_[s.shard], ":", s.member);
}

absl::StatusOr<std::string> ShardSource::ReadRange(int32_t shard, int64_t offset,
                                                   int64_t length) const {
  return ReadFileRange(shards_[shard], offset, static_cast<size_t>(length));
}

absl::StatusOr<EncodedSample> ShardSource::Read(int64_t index) const {
  const Sample& s = samples_[index];
  ASSIGN_OR_RETURN(std::string bytes, ReadRange(s.shard, s.data_offset, s.size));
  if (static_cast<int64_t>(bytes.size()) != s.size) {
    return absl::DataLossError(absl::StrCat(name(index), ": truncated (", bytes.size(),
                                            " of ", s.size, " bytes)"));
  }
  return EncodedSample{std::move(bytes), s.label, name(index)};
}

}  // namespace tessera::trainer::data
