// The files the shard packer (shard_packer.h) writes beside the tar shards of
// a `shards` dataset, so a job can plan its epochs without opening any tar:
//
//   ROOT/classes.txt   class i's name on line i + 1 (UTF-8, '\n' after each);
//                      a shard's KEY.cls member holds the index as ASCII digits
//   ROOT/index.json    {"format": "tessera-shards", "version": 1,
//                       "classes": "classes.txt", "num_classes": 10,
//                       "splits": {"train": [{"file": "train-000000.tar",
//                                             "samples": 1000}, ...],
//                                  "val": [...]}}
//
// Shards written by other tools (webdataset's ShardWriter, plain tar) can be
// used by writing these two files beside them.
//
// Errors: NotFound naming a missing file, InvalidArgument naming what is
// malformed. Plain values and functions: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_SHARD_INDEX_H_
#define TESSERA_WORKER_TRAINER_DATA_SHARD_INDEX_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::trainer::data {

inline constexpr char kShardIndexFile[] = "index.json";
inline constexpr char kShardClassesFile[] = "classes.txt";

struct ShardFile {
  std::string file;  // relative to the dataset root
  int64_t samples = 0;
};

struct ShardIndex {
  std::vector<std::string> classes;
  std::map<std::string, std::vector<ShardFile>> splits;  // "train", "val"
};

// Reads ROOT/index.json and ROOT/classes.txt.
absl::StatusOr<ShardIndex> ReadShardIndex(const std::string& root);

// Writes both files (each through a temporary file and a rename).
absl::Status WriteShardIndex(const std::string& root, const ShardIndex& index);

// Whether ROOT holds an index.json (a `shards` dataset rather than an image
// folder).
bool IsShardDataset(const std::string& root);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SHARD_INDEX_H_
