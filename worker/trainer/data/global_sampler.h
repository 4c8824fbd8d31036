// Which samples each rank visits in an epoch, and where an epoch stands, as
// one number that means the same at every world size.
//
// Random-access datasets (image folders): each epoch has an order, a
// permutation of all n samples seeded by (job seed, epoch) and identical on
// every rank (natural order when shuffle is off). Positions 0..n-1 of that
// order are consumed front to back by all ranks together: from a start
// position g, rank r of W visits positions g + r, g + r + W, g + r + 2W, ...
// The epoch's state is the global position: the number of positions consumed
// by all ranks together, g + W * (samples each rank consumed). Hence:
//  - Equal counts: every rank visits floor((n - g) / W) samples; the last
//    (n - g) % W positions of the epoch are dropped (drop_remainder, training).
//    With drop_remainder off (evaluation) ranks below (n - g) % W visit one
//    more, so every sample is visited once.
//  - Global batches: when every rank takes b samples per step, step k of the
//    epoch consumes exactly positions [g + kWb, g + (k+1)Wb) of the order: the
//    same contiguous block of the same permutation whatever W is.
//  - Resume at any world size: a job stopped at global position g (a multiple
//    of the global batch it ran) resumes from g with another W (and per-rank
//    batch b') and visits the remaining positions g, g+1, ... in order: its
//    global batch k is positions [g + kW'b', g + (k+1)W'b'). With W'b' = Wb it
//    sees exactly the global batches the uninterrupted run would have seen
//    (each as a set: which rank holds which sample of a block differs, which
//    a data-parallel gradient average does not see). Only the dropped tail,
//    (n - g) % W', depends on W'.
//
// Sharded datasets (tar shards): see AssignShards below.
//
// Immutable after Create: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_GLOBAL_SAMPLER_H_
#define TESSERA_WORKER_TRAINER_DATA_GLOBAL_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer::data {

struct GlobalSamplerOptions {
  int64_t num_samples = 0;
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;           // the job seed
  bool shuffle = true;         // a new permutation each epoch; off: natural order
  bool drop_remainder = true;  // equal counts per rank; off: every sample once
};

class GlobalSampler {
 public:
  // InvalidArgument for a negative count or a rank outside [0, world_size).
  static absl::StatusOr<GlobalSampler> Create(const GlobalSamplerOptions& options);

  // The epoch's order: position -> sample index. The same on every rank.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Samples this rank visits in an epoch resumed at `start_position` (0: from
  // the beginning). 0 when start_position >= num_samples.
  int64_t RankCount(int64_t start_position = 0) const;

  // This rank's sample indices in visiting order, from `start_position`.
  std::vector<int64_t> RankSamples(int64_t epoch, int64_t start_position = 0) const;

  // The global position once every rank has visited `per_rank` samples from
  // `start_position`: start_position + world_size * per_rank (capped at
  // num_samples: the dropped tail counts as consumed at the epoch's end).
  int64_t PositionAfter(int64_t start_position, int64_t per_rank) const;

  const GlobalSamplerOptions& options() const { return options_; }

 private:
  explicit GlobalSampler(const GlobalSamplerOptions& options) : options_(options) {}

  GlobalSamplerOptions options_;
};

// Tar shards: whole shards go to ranks. Each epoch the shard list is shuffled
// with a generator seeded by (job seed, epoch), the same on every rank, and
// rank r takes the shuffled shards j with j % W == r, in that order. Ranks
// then hold different sample counts, so each visits only the first
// min over ranks of its count (the rest of the longer streams is dropped this
// epoch; another epoch's shuffle drops other samples). The counts come from
// the packer's index (shard_index.h), so no tar is opened to plan.
//
// Position: the global position is W * (samples each rank consumed). Resumed
// at the same world size it is exact (each rank skips its first g / W
// samples, replaying its deterministic stream). Resumed at another world size
// the epoch's assignment is redone for W' and each rank skips g / W' samples:
// the right number of samples remain, but not necessarily the same ones.
struct RankShards {
  std::vector<int> shards;  // indices into the shard list, in reading order
  int64_t samples = 0;      // samples it visits after `skip` (equal on all ranks)
  int64_t skip = 0;         // leading samples of its stream already consumed
  int64_t dropped = 0;      // samples of its shards it leaves out this epoch
};

// InvalidArgument when there are fewer shards than ranks (a rank would have
// none: pack with a smaller --shard-size) or a rank is out of range.
absl::StatusOr<RankShards> AssignShards(const std::vector<int64_t>& shard_samples,
                                        uint64_t seed, int64_t epoch, int world_size,
                                        int rank, int64_t start_position = 0);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_GLOBAL_SAMPLER_H_
