// One split of a WebDataset-style tar shard dataset (tessera-data pack writes
// them: ROOT/SPLIT-NNNNNN.tar with ROOT/index.json and ROOT/classes.txt) as
// random-access encoded images (encoded_image_source.h): every image member's
// shard, data offset and size, and its label (its KEY.cls member), found by
// one pass over the tar headers at open; a sample is then read at its offset.
// Sample ids follow the index's shard order and, within a shard, the members'
// keys in sorted order.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<ShardSource> train,
//                    ShardSource::Open("/data/pets-shards", "train"));
//
// Immutable after Open: thread-safe (each Read opens its shard for itself).
#ifndef TESSERA_WORKER_TRAINER_DATA_SHARD_SOURCE_H_
#define TESSERA_WORKER_TRAINER_DATA_SHARD_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trainer/data/encoded_image_source.h"

namespace tessera::trainer::data {

class ShardSource final : public EncodedImageSource {
 public:
  // NotFound when the index lists no shards for `split`; InvalidArgument for
  // a malformed index or tar, an image without its .cls, a label outside the
  // classes, or a split without images.
  static absl::StatusOr<std::unique_ptr<ShardSource>> Open(const std::string& root,
                                                           const std::string& split);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  const std::vector<std::string>& class_names() const override { return classes_; }
  int64_t label(int64_t index) const override { return samples_[index].label; }
  // SHARD_PATH:MEMBER
  std::string name(int64_t index) const override;
  absl::StatusOr<EncodedSample> Read(int64_t index) const override;

 private:
  struct Sample {
    int32_t shard = 0;
    std::string member;  // the image member's name, e.g. "n01440764_10026.jpg"
    int64_t data_offset = 0;
    int64_t size = 0;
    int64_t label = 0;
  };

  ShardSource() = default;

  absl::Status AddShard(int32_t shard);
  // Reads `length` bytes of shard `shard` from `offset` (fewer at its end).
  absl::StatusOr<std::string> ReadRange(int32_t shard, int64_t offset,
                                        int64_t length) const;

  std::vector<std::string> shards_;  // paths
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SHARD_SOURCE_H_
