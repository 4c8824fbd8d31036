// The one seeded random generator of the data layer: counter-based, keyed by
// (seed, epoch, stream id), SplitMix64 over a mixed key, fully specified, so
// every platform, rank and thread draws the same numbers for the same key. A
// sample's augmentation (transforms.h, augmentation.h) is keyed by its sample
// id (>= 0); the sampler's permutations (distributed_sampler.h) by the
// negative stream ids below, so no two uses share a sequence.
//
// A value type; one instance is used by one thread at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_SAMPLE_RNG_H_
#define TESSERA_WORKER_TRAINER_DATA_SAMPLE_RNG_H_

#include <cstdint>
#include <vector>

#include "common/seeded_random.h"

namespace tessera::trainer::data {

// SplitMix64 (Steele, Lea and Flood, 2014), the project's one copy: the
// generator under every seeded stream of the trainer, here and in the
// synthetic dataset.
using SplitMix64 = ::tessera::SeededRandom;

// Stream ids of the sampler's draws.
inline constexpr int64_t kSamplePermutationStream = -1;  // an epoch's order
inline constexpr int64_t kSubsetStream = -4;             // the weak-scaling subset
inline constexpr int64_t kValidationStream =
    -5;  // the held-out validation split (by class)

// A counter-based generator keyed by (seed, epoch, sample id): SplitMix64 over
// a mixed key, fully specified so every platform draws the same numbers.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t sample_id);

  uint64_t Next() { return rng_.Next(); }
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi);
  // Uniform integer in [lo, hi] (inclusive), unbiased.
  int64_t UniformInt(int64_t lo, int64_t hi);

 private:
  SplitMix64 rng_;
};

// A permutation of [0, n) by Fisher-Yates driven by `rng`.
std::vector<int64_t> SeededShuffle(int64_t n, SampleRng& rng);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SAMPLE_RNG_H_
