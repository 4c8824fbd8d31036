// Packs an image folder (image_folder.h) into WebDataset-style tar shards:
//
//   OUT/train-000000.tar, OUT/train-000001.tar, ...   OUT/val-000000.tar, ...
//   OUT/classes.txt, OUT/index.json                  (shard_index.h)
//
// Each split's samples go, in the folder's order (class, then path), shard_size
// to a shard, as two consecutive members: KEY.jpg or KEY.png (the extension
// from the bytes' format, whatever the file was called) and KEY.cls (the class
// index in ASCII), where KEY is the sample's index in its split, zero-padded to
// eight digits. The archives are plain ustar (tar_writer.h): `tar -tf`,
// Python's tarfile and webdataset.WebDataset read them. Files whose bytes are
// not JPEG or PNG, or that cannot be read, are left out and reported (the
// pixels are not decoded: run `tessera-data check` for that).
//
// Errors: those of ImageFolder::Open (before anything is written), and
// Internal for write failures. Not thread-safe: one pack per output directory.
#ifndef TESSERA_WORKER_TRAINER_DATA_SHARD_PACKER_H_
#define TESSERA_WORKER_TRAINER_DATA_SHARD_PACKER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::trainer::data {

// Progress of a long run: (what, done, total), called every few hundred items
// and at the end of each stage.
using ProgressFn =
    std::function<void(absl::string_view what, int64_t done, int64_t total)>;

struct PackOptions {
  std::string root;                                    // the image folder
  std::string out;                                     // created if missing
  int64_t shard_size = 1000;                           // samples per shard
  std::vector<std::string> splits = {"train", "val"};  // a missing val is skipped
  ProgressFn progress;                                 // may be empty
};

struct PackReport {
  std::vector<std::string> classes;
  std::map<std::string, int64_t> samples;  // per split
  int64_t shards = 0;
  std::vector<std::string> left_out;  // "path: reason"
};

absl::StatusOr<PackReport> PackImageFolder(const PackOptions& options);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SHARD_PACKER_H_
