#include "worker/trainer/data/sample_rng.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace tessera::trainer::data {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t sample_id)
    : state_(SplitMix(SplitMix(SplitMix(seed) ^ static_cast<uint64_t>(epoch)) ^
                      static_cast<uint64_t>(sample_id))) {}

uint64_t SampleRng::Next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SampleRng::Uniform(double lo, double hi) {
  const double unit = static_cast<double>(Next() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * unit;
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
