#include "worker/trainer/data/global_sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer::data {

absl::StatusOr<GlobalSampler> GlobalSampler::Create(const GlobalSamplerOptions& options) {
  if (options.num_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler over ", options.num_samples, " samples"));
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is not in a world of ", options.world_size));
  }
  return GlobalSampler(options);
}

std::vector<int64_t> GlobalSampler::EpochOrder(int64_t epoch) const {
  if (!options_.shuffle) {
    std::vector<int64_t> order(static_cast<size_t>(options_.num_samples));
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  SampleRng rng(options_.seed, epoch, kSamplePermutationStream);
  return SeededShuffle(options_.num_samples, rng);
}

int64_t GlobalSampler::RankCount(int64_t start_position) const {
  const int64_t left = options_.num_samples - std::max<int64_t>(start_position, 0);
  if (left <= 0) return 0;
  const int64_t full = left / options_.world_size;
  if (options_.drop_remainder) return full;
  return full + (options_.rank < left % options_.world_size ? 1 : 0);
}

std::vector<int64_t> GlobalSampler::RankSamples(int64_t epoch,
                                                int64_t start_position) const {
  start_position = std::max<int64_t>(start_position, 0);
  const int64_t count = RankCount(start_position);
  if (count == 0) return {};
  const std::vector<int64_t> order = EpochOrder(epoch);
  std::vector<int64_t> samples(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    samples[j] = order[start_position + options_.rank + j * options_.world_size];
  }
  return samples;
}

int64_t GlobalSampler::PositionAfter(int64_t start_position, int64_t per_rank) const {
  if (per_rank >= RankCount(start_position)) return options_.num_samples;
  return start_position + options_.world_size * per_rank;
}

absl::StatusOr<RankShards> AssignShards(const std::vector<int64_t>& shard_samples,
                                        uint64_t seed, int64_t epoch, int world_size,
                                        int rank, int64_t start_position) {
  const auto shards = static_cast<int64_t>(shard_samples.size());
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in a world of ", world_size));
  }
  if (shards < world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        shards, " shards cannot feed ", world_size,
        " ranks (every rank needs at least one): pack with a smaller --shard-size"));
  }
  SampleRng rng(seed, epoch, kShardOrderStream);
  const std::vector<int64_t> order = SeededShuffle(shards, rng);
  std::vector<int64_t> counts(static_cast<size_t>(world_size), 0);
  RankShards mine;
  for (int64_t j = 0; j < shards; ++j) {
    const int owner = static_cast<int>(j % world_size);
    counts[owner] += shard_samples[order[j]];
    if (owner == rank) mine.shards.push_back(static_cast<int>(order[j]));
  }
  const int64_t equal = *std::min_element(counts.begin(), counts.end());
  mine.dropped = counts[rank] - equal;
  mine.skip = std::clamp<int64_t>(start_position / world_size, 0, equal);
  mine.samples = equal - mine.skip;
  return mine;
}

}  // namespace tessera::trainer::data
