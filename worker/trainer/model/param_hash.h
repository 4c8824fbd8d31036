// FNV-1a 64-bit hashing of raw bytes, used to fingerprint the final model
// parameters: ranks of a data-parallel job that stayed in sync report the same
// hash. Written as 16 lowercase hex digits.
//
// A Fnv1a64 is a small value type; thread-compatible.
#ifndef TESSERA_WORKER_TRAINER_MODEL_PARAM_HASH_H_
#define TESSERA_WORKER_TRAINER_MODEL_PARAM_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::trainer {

class Fnv1a64 {
 public:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  static constexpr uint64_t kPrime = 0x100000001b3ULL;

  // Feeds `size` bytes at `data`, in order.
  void Update(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      state_ ^= bytes[i];
      state_ *= kPrime;
    }
  }

  uint64_t value() const { return state_; }

  // The hash as 16 lowercase hex digits.
  std::string Hex() const;

 private:
  uint64_t state_ = kOffsetBasis;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_PARAM_HASH_H_
