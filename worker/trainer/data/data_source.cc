#include "worker/trainer/data/data_source.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/global_sampler.h"
#include "worker/trainer/data/shard_stream.h"

namespace tessera::trainer::data {
namespace {

// A random-access source's samples at the given indices (for an image folder:
// the positions the sampler gives this rank).
class FolderStream : public SampleStream {
 public:
  FolderStream(const EncodedImageSource& folder, std::vector<int64_t> samples)
      : folder_(folder), samples_(std::move(samples)) {}

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  bool sequential() const override { return false; }
  absl::StatusOr<StreamSample> Read(int64_t k) override {
    if (k < 0 || k >= size()) return absl::OutOfRangeError(absl::StrCat("sample ", k));
    absl::StatusOr<EncodedSample> sample = folder_.Read(samples_[k]);
    if (!sample.ok()) return sample.status();
    return StreamSample{*std::move(sample), samples_[k]};
  }

 private:
  const EncodedImageSource& folder_;  // Not owned.
  const std::vector<int64_t> samples_;
};

}  // namespace

DataSource::~DataSource() = default;

absl::StatusOr<std::unique_ptr<DataSource>> DataSource::Open(
    const DataSourceOptions& options) {
  std::unique_ptr<DataSource> source(new DataSource());
  source->options_ = options;
  source->kind_ = options.kind;
  if (options.kind == "auto") {
    source->kind_ = IsShardDataset(options.root) ? "shards" : "imagefolder";
  }
  if (source->kind_ == "imagefolder") {
    absl::StatusOr<std::unique_ptr<ImageFolder>> folder =
        ImageFolder::Open(options.root, options.split, options.folder);
    if (!folder.ok()) return folder.status();
    source->folder_ = *std::move(folder);
    source->classes_ = source->folder_->class_names();
    source->size_ = source->folder_->size();
    return source;
  }
  if (source->kind_ != "shards") {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset kind '", options.kind, "' is not imagefolder, shards or auto"));
  }
  absl::StatusOr<ShardIndex> index = ReadShardIndex(options.root);
  if (!index.ok()) return index.status();
  const auto split = index->splits.find(options.split);
  if (split == index->splits.end() || split->second.empty()) {
    return absl::NotFoundError(absl::StrCat("shard dataset ", options.root, " has no '",
                                            options.split, "' shards in its index"));
  }
  source->classes_ = std::move(index->classes);
  source->shards_ = split->second;
  for (const ShardFile& f : source->shards_) source->size_ += f.samples;
  return source;
}

absl::StatusOr<std::unique_ptr<SampleStream>> DataSource::OpenEpoch(
    const EpochRequest& e) const {
  if (folder_ == nullptr) return OpenShardEpoch(e);
  GlobalSamplerOptions o;
  o.num_samples = size_;
  o.world_size = e.world_size;
  o.rank = e.rank;
  o.seed = e.seed;
  o.shuffle = e.shuffle;
  o.drop_remainder = e.drop_remainder;
  absl::StatusOr<GlobalSampler> sampler = GlobalSampler::Create(o);
  if (!sampler.ok()) return sampler.status();
  return std::make_unique<FolderStream>(*folder_,
                                        sampler->RankSamples(e.epoch, e.start_position));
}

absl::StatusOr<std::unique_ptr<SampleStream>> DataSource::OpenShardEpoch(
    const EpochRequest& e) const {
  std::vector<int64_t> counts;
  std::vector<int64_t> first_ids;
  int64_t next_id = 0;
  for (const ShardFile& f : shards_) {
    counts.push_back(f.samples);
    first_ids.push_back(next_id);
    next_id += f.samples;
  }
  // Evaluation uses one fixed assignment (that of seed 0, epoch 0) in every
  // epoch; training draws a new one per epoch.
  const uint64_t seed = e.shuffle ? e.seed : 0;
  absl::StatusOr<RankShards> mine = AssignShards(counts, seed, e.shuffle ? e.epoch : 0,
                                                 e.world_size, e.rank, e.start_position);
  if (!mine.ok()) return mine.status();
  ShardStreamOptions o;
  o.root = options_.root;
  for (const int shard : mine->shards) {
    o.shards.push_back({shards_[shard].file, first_ids[shard]});
  }
  o.skip = mine->skip;
  o.count = mine->samples;
  o.num_classes = static_cast<int>(classes_.size());
  o.shuffle_buffer = e.shuffle ? options_.shuffle_buffer : 0;
  o.seed = e.seed;
  o.epoch = e.epoch;
  o.rank = e.rank;
  o.tar = options_.tar;
  return std::make_unique<ShardStream>(std::move(o));
}

std::unique_ptr<SampleStream> MakeIndexStream(const EncodedImageSource& source,
                                              std::vector<int64_t> indices) {
  return std::make_unique<FolderStream>(source, std::move(indices));
}

int64_t GlobalPosition(const EpochRequest& e, int64_t per_rank) {
  return e.start_position + int64_t{e.world_size} * per_rank;
}

}  // namespace tessera::trainer::data
