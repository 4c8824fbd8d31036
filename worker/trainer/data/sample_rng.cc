#include "worker/trainer/data/sample_rng.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace tessera::trainer::data {

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t sample_id)
    : rng_(SplitMix64::Hash(
          SplitMix64::Hash(SplitMix64::Hash(seed) ^ static_cast<uint64_t>(epoch)) ^
          static_cast<uint64_t>(sample_id))) {}

double SampleRng::Uniform(double lo, double hi) {
  return lo + (hi - lo) * rng_.NextDouble();
}

int64_t SampleRng::UniformInt(int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range == 0) return static_cast<int64_t>(Next());  // the full 64-bit range
  // Rejection of the top partial block keeps the draw unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t v = Next();
  while (v >= limit) v = Next();
  return lo + static_cast<int64_t>(v % range);
}

std::vector<int64_t> SeededShuffle(int64_t n, SampleRng& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(0, i)]);
  }
  return order;
}

}  // namespace tessera::trainer::data
