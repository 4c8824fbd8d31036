// Splits a dataset's indices among the ranks of a data-parallel job.
//
// Training (shuffle on): each epoch permutes [0, n) with a generator seeded by
// seed + epoch, drops the tail so the count divides the world size, and gives rank
// r the strided positions r, r + W, r + 2W, ... of that permutation. Every rank
// gets the same number of samples, shards are disjoint, and a shard depends only
// on (n, seed, epoch, rank, world size), never on process start order or on
// which epochs were asked for before.
//
// Weak scaling (subset_size set): the job trains on a fixed subset of the data,
// the first subset_size positions of a permutation seeded by `seed` alone, so it
// is the same on every rank and in every epoch, and a larger subset contains a
// smaller one. Each epoch then permutes the subset as above.
//
// Evaluation (shuffle off, keep_tail on): rank r takes r, r + W, ... of [0, n)
// in order, so all samples are covered exactly once and shard sizes differ by at
// most one.
//
// Immutable after Create: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_DISTRIBUTED_SAMPLER_H_
#define TESSERA_WORKER_TRAINER_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer {

struct DistributedSamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  int64_t seed = 0;
  bool shuffle = true;     // permute per epoch (training); off: natural order
  bool keep_tail = false;  // keep the n % world_size leftovers (evaluation)
  // Use only a seeded subset of this many samples (weak scaling; see
  // WeakScalingSubsetSize); unset: all dataset_size samples.
  std::optional<int64_t> subset_size;
};

class DistributedSampler {
 public:
  // InvalidArgument for a negative size, a subset larger than the dataset or a rank
  // outside [0, world_size).
  static absl::StatusOr<DistributedSampler> Create(
      const DistributedSamplerOptions& options);

  // Samples this rank sees per epoch.
  int64_t num_samples() const { return num_samples_; }

  // This rank's indices for `epoch`, in visiting order.
  std::vector<int64_t> EpochIndices(int64_t epoch) const;

  // Every rank's samples of `epoch` together, in the global order (the one
  // order all ranks share; no tail dropped): rank r's EpochIndices are its
  // positions r, r + W, r + 2W, ... Position p of a run's epoch is the same
  // sample at any world size, which is what lets a run resume at another
  // world size (data_position.h).
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Samples in one epoch, all ranks together (the subset's size under weak
  // scaling).
  int64_t epoch_size() const {
    return options_.subset_size.value_or(options_.dataset_size);
  }

 private:
  explicit DistributedSampler(const DistributedSamplerOptions& options);

  DistributedSamplerOptions options_;
  std::vector<int64_t> subset_;  // the sample ids in use when subset_size is set
  int64_t num_samples_;
};

// Training samples a job of `world_size` ranks uses under weak scaling:
// world_size * floor(weak_fraction * dataset_size), capped at dataset_size. Every
// rank keeps the same floor(weak_fraction * dataset_size) samples per epoch while
// the job's share grows with its size (the paper's 10% on 1 GPU, 80% on 8), until
// world_size * weak_fraction reaches 1. Strong scaling uses all samples instead.
int64_t WeakScalingSubsetSize(int64_t dataset_size, double weak_fraction, int world_size);

// The permutation of [0, n) used for `seed` (the sampler passes seed + epoch).
// Fisher-Yates driven by the data's one seeded generator (sample_rng.h), fully
// specified, so every platform produces the same order.
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_DISTRIBUTED_SAMPLER_H_
