// A dataset split of encoded images, whichever kind it is stored as, and the
// per-rank, per-epoch sample streams the decode pipeline consumes:
//
//   DataSourceOptions o;  o.kind = "imagefolder";  o.root = "/data/pets";
//   ASSIGN_OR_RETURN(auto train, DataSource::Open(o));       // fails early
//   EpochRequest e{.seed = 7, .epoch = 3, .rank = r, .world_size = w,
//                  .start_position = resumed_position};
//   ASSIGN_OR_RETURN(auto stream, train->OpenEpoch(e));
//   // BatchPipeline(stream, ...) decodes it; after k samples per rank the
//   // epoch's global position is GlobalPosition(e, k).
//
// Kinds: "imagefolder" (image_folder.h; ROOT/SPLIT/CLASS/*.jpg), "shards"
// (ROOT/SPLIT-NNNNNN.tar with ROOT/index.json and ROOT/classes.txt:
// shard_index.h, shard_stream.h), or "auto": shards when ROOT/index.json
// exists, an image folder otherwise. Which samples each rank visits, and what
// the global position means at another world size, is global_sampler.h's
// contract.
//
// Open fails, before any peer waits, with NotFound / InvalidArgument naming a
// missing directory, an empty class, a class missing from the other split, or
// a malformed index. Immutable after Open: OpenEpoch may be called from any
// thread; each stream is used as sample_stream.h says.
#ifndef TESSERA_WORKER_TRAINER_DATA_DATA_SOURCE_H_
#define TESSERA_WORKER_TRAINER_DATA_DATA_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/sample_stream.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/tar_reader.h"

namespace tessera::trainer::data {

struct DataSourceOptions {
  std::string kind = "auto";  // "imagefolder" | "shards" | "auto"
  std::string root;
  std::string split = "train";  // "train" | "val"
  ImageFolderOptions folder;
  // Shards: encoded samples held for shuffling (training epochs only).
  size_t shuffle_buffer = 256;
  TarReaderOptions tar;
};

struct EpochRequest {
  uint64_t seed = 0;  // the job seed
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  int64_t start_position = 0;  // the epoch's global position to resume from
  bool shuffle = true;         // training; off for evaluation (natural order)
  bool drop_remainder = true;  // equal counts per rank; off: every sample once
};

class DataSource {
 public:
  static absl::StatusOr<std::unique_ptr<DataSource>> Open(
      const DataSourceOptions& options);
  ~DataSource();

  const std::string& kind() const { return kind_; }  // "imagefolder" | "shards"
  const std::vector<std::string>& class_names() const { return classes_; }
  int64_t size() const { return size_; }  // samples in the split

  // This rank's stream for the epoch. InvalidArgument for a bad rank, or
  // (shards) fewer shards than ranks. Shards ignore drop_remainder: their
  // per-rank counts are always equalised, so an evaluation over shards leaves
  // out the longer ranks' extra samples (see AssignShards); with shuffle off
  // they use one fixed assignment and no shuffle buffer.
  absl::StatusOr<std::unique_ptr<SampleStream>> OpenEpoch(const EpochRequest& e) const;

  // The folder behind an "imagefolder" source, null for shards.
  const ImageFolder* folder() const { return folder_.get(); }

 private:
  DataSource() = default;

  absl::StatusOr<std::unique_ptr<SampleStream>> OpenShardEpoch(
      const EpochRequest& e) const;

  DataSourceOptions options_;
  std::string kind_;
  std::vector<std::string> classes_;
  int64_t size_ = 0;
  std::unique_ptr<ImageFolder> folder_;  // imagefolder
  std::vector<ShardFile> shards_;        // shards
};

// A random-access stream over the given sample indices of `source`, in that
// order (ids are the indices): for callers that choose the ids themselves
// (the trainer's own sampler). `source` is not owned and must outlive it.
std::unique_ptr<SampleStream> MakeIndexStream(const EncodedImageSource& source,
                                              std::vector<int64_t> indices);

// The epoch's global position once every rank of `e` has consumed `per_rank`
// samples of its stream: e.start_position + e.world_size * per_rank.
int64_t GlobalPosition(const EpochRequest& e, int64_t per_rank);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_DATA_SOURCE_H_
