#include "worker/trainer/data/distributed_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer {

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed) {
  data::SampleRng rng(seed, /*epoch=*/0, data::kSamplePermutationStream);
  return data::SeededShuffle(n, rng);
}

int64_t WeakScalingSubsetSize(int64_t dataset_size, double weak_fraction,
                              int world_size) {
  // The epsilon keeps products such as 0.29 * 100 = 28.999... at their intended
  // whole number.
  const auto per_rank = static_cast<int64_t>(
      std::floor(weak_fraction * static_cast<double>(dataset_size) + 1e-9));
  const int64_t total = std::max<int64_t>(0, per_rank) * std::max(1, world_size);
  return std::min(dataset_size, total);
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(
    const DistributedSamplerOptions& options) {
  if (options.dataset_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset size must be >= 0, got ", options.dataset_size));
  }
  if (options.subset_size.has_value() &&
      (*options.subset_size < 0 || *options.subset_size > options.dataset_size)) {
    return absl::InvalidArgumentError(absl::StrCat("subset of ", *options.subset_size,
                                                   " samples is not in [0, dataset size ",
                                                   options.dataset_size, "]"));
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is not in [0, world size ", options.world_size, ")"));
  }
  return DistributedSampler(options);
}

DistributedSampler::DistributedSampler(const DistributedSamplerOptions& options)
    : options_(options) {
  int64_t n = options.dataset_size;
  if (options.subset_size.has_value()) {
    // A stream apart from the per-epoch orders (seed + epoch) so that the subset
    // is not simply the head of epoch 0.
    data::SampleRng rng(static_cast<uint64_t>(options.seed), /*epoch=*/0,
                        data::kSubsetStream);
    subset_ = data::SeededShuffle(n, rng);
    subset_.resize(static_cast<size_t>(*options.subset_size));
    n = *options.subset_size;
  }
  const int64_t w = options.world_size;
  num_samples_ = options.keep_tail ? (n - options.rank + w - 1) / w : n / w;
}

std::vector<int64_t> DistributedSampler::EpochOrder(int64_t epoch) const {
  const bool subset = options_.subset_size.has_value();
  const int64_t n = epoch_size();
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = SeededPermutation(n, static_cast<uint64_t>(options_.seed + epoch));
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (subset) {
    for (int64_t& position : order) position = subset_[static_cast<size_t>(position)];
  }
  return order;
}

std::vector<int64_t> DistributedSampler::EpochIndices(int64_t epoch) const {
  const bool subset = options_.subset_size.has_value();
  const int64_t n = subset ? *options_.subset_size : options_.dataset_size;
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = SeededPermutation(n, static_cast<uint64_t>(options_.seed + epoch));
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) {
    const int64_t position =
        order[static_cast<size_t>(options_.rank + k * options_.world_size)];
    shard.push_back(subset ? subset_[static_cast<size_t>(position)] : position);
  }
  return shard;
}

}  // namespace tessera::trainer
