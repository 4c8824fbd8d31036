#include "worker/trainer/data/shard_index.h"

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"

namespace tessera::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxIndexBytes = size_t{64} << 20;

absl::Status Malformed(const fs::path& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
}

// The list of one split: [{"file": ..., "samples": ...}, ...].
absl::StatusOr<std::vector<ShardFile>> ParseSplit(const nlohmann::json& list,
                                                  const fs::path& path) {
  if (!list.is_array()) return Malformed(path, "a split is not a list");
  std::vector<ShardFile> files;
  for (const nlohmann::json& entry : list) {
    if (!entry.is_object() || !entry.contains("file") || !entry["file"].is_string() ||
        !entry.contains("samples") || !entry["samples"].is_number_integer()) {
      return Malformed(path,
                       "a shard entry needs \"file\" (string) and \"samples\" (integer)");
    }
    ShardFile f{entry["file"].get<std::string>(), entry["samples"].get<int64_t>()};
    if (f.samples < 0 || f.file.empty() || f.file.find("..") != std::string::npos) {
      return Malformed(path, absl::StrCat("bad shard entry for '", f.file, "'"));
    }
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

bool IsShardDataset(const std::string& root) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(root) / kShardIndexFile, ec);
}

absl::StatusOr<ShardIndex> ReadShardIndex(const std::string& root) {
  const fs::path index_path = fs::path(root) / kShardIndexFile;
  const fs::path classes_path = fs::path(root) / kShardClassesFile;
  absl::StatusOr<std::string> text = ReadFile(index_path.string(), kMaxIndexBytes);
  if (!text.ok()) return text.status();
  const nlohmann::json json =
      nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return Malformed(index_path, "not a JSON object");
  if (!json.contains("format") || json["format"] != "tessera-shards") {
    return Malformed(index_path, "\"format\" is not \"tessera-shards\"");
  }
  if (!json.contains("splits") || !json["splits"].is_object()) {
    return Malformed(index_path, "no \"splits\" object");
  }
  ShardIndex index;
  for (const auto& [split, list] : json["splits"].items()) {
    absl::StatusOr<std::vector<ShardFile>> files = ParseSplit(list, index_path);
    if (!files.ok()) return files.status();
    index.splits[split] = *std::move(files);
  }
  absl::StatusOr<std::string> classes = ReadFile(classes_path.string(), kMaxIndexBytes);
  if (!classes.ok()) return classes.status();
  for (absl::string_view line : absl::StrSplit(*classes, '\n', absl::SkipEmpty())) {
    index.classes.emplace_back(line);
  }
  if (index.classes.empty()) return Malformed(classes_path, "no class names");
  if (json.contains("num_classes") &&
      json["num_classes"] != static_cast<int64_t>(index.classes.size())) {
    return Malformed(index_path,
                     absl::StrCat("\"num_classes\" differs from the ",
                                  index.classes.size(), " lines of ", kShardClassesFile));
  }
  return index;
}

absl::Status WriteShardIndex(const std::string& root, const ShardIndex& index) {
  std::string classes;
  for (const std::string& name : index.classes) {
    if (name.empty() || name.find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("class name '", name, "' cannot be a line of classes.txt"));
    }
    absl::StrAppend(&classes, name, "\n");
  }
  nlohmann::json splits = nlohmann::json::object();
  for (const auto& [split, files] : index.splits) {
    nlohmann::json list = nlohmann::json::array();
    for (const ShardFile& f : files)
      list.push_back({{"file", f.file}, {"samples", f.samples}});
    splits[split] = std::move(list);
  }
  const nlohmann::json json = {{"format", "tessera-shards"},
                               {"version", 1},
                               {"classes", kShardClassesFile},
                               {"num_classes", index.classes.size()},
                               {"splits", std::move(splits)}};
  if (absl::Status s =
          WriteFileAtomically((fs::path(root) / kShardClassesFile).string(), classes);
      !s.ok()) {
    return s;
  }
  return WriteFileAtomically((fs::path(root) / kShardIndexFile).string(),
                             json.dump(1) + "\n");
}

}  // namespace tessera::trainer::data
