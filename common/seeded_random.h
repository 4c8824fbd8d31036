// SeededRandom: a small seeded generator (SplitMix64, Steele, Lea and Flood
// 2014) whose every output is specified here, so that one seed draws the same
// numbers on every platform and standard library. The std distributions
// (std::uniform_real_distribution and the others) do not promise that: their
// algorithms are implementation-defined. For draws that must be reproducible,
// such as a search's sampled trials (common/search_spec.h); never for secrets.
//
// Use ForStream(seed, n) for the n-th of many independent draws of one seed
// (trial n of a search), so that each draw does not depend on how many came
// before it.
//
// The one SplitMix64 of the project: the trainer's data streams
// (worker/trainer/data/sample_rng.h, the synthetic dataset) draw from it too,
// so their sequences, and the parameter hashes tests compare, follow from it.
//
// A value type; one instance is used by one thread at a time.
#ifndef TESSERA_COMMON_SEEDED_RANDOM_H_
#define TESSERA_COMMON_SEEDED_RANDOM_H_

#include <cstdint>
#include <limits>

namespace tessera {

class SeededRandom {
 public:
  explicit constexpr SeededRandom(uint64_t seed) : state_(seed) {}

  // The first number a generator seeded with `x` draws: `x` mixed, for
  // deriving a key or a seed from others.
  static constexpr uint64_t Hash(uint64_t x) { return SeededRandom(x).Next(); }

  // The generator of stream `stream` of `seed`.
  static constexpr SeededRandom ForStream(uint64_t seed, uint64_t stream) {
    return SeededRandom(Mix(Mix(seed) + kGolden * (stream + 1)));
  }

  // The next 64 random bits.
  constexpr uint64_t Next() {
    state_ += kGolden;
    return Mix(state_);
  }

  // Uniform in [0, 1): the top 53 bits as a fraction, exact in a double.
  constexpr double NextDouble() {
    return static_cast<double>(Next() >> 11) *
           (1.0 / static_cast<double>(uint64_t{1} << 53));
  }

  // Uniform integer in [lo, hi] (inclusive; lo <= hi), without modulo bias:
  // draws below 2^64 mod n, which would favour the small remainders, are
  // drawn again.
  int64_t UniformInt(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    if (span == std::numeric_limits<uint64_t>::max()) return static_cast<int64_t>(Next());
    const uint64_t n = span + 1;
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    uint64_t x = Next();
    while (x < threshold) x = Next();
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % n);
  }

 private:
  static constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

  // SplitMix64's output function.
  static constexpr uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_SEEDED_RANDOM_H_
