// Small cryptographic helpers over OpenSSL's libcrypto: SHA-256, a comparison
// whose time does not depend on where two secrets differ, and bytes from the
// system's random generator. The coordinator's token store, trainer
// credentials and worker credentials use them; there is no other copy.
//
// Thread-safety: every function is safe to call from any thread.
#ifndef TESSERA_COMMON_CRYPTO_H_
#define TESSERA_COMMON_CRYPTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// The 32-byte SHA-256 digest of `data` (raw bytes, not hex).
std::string Sha256(absl::string_view data);

// Whether `a` and `b` are equal, in time that depends only on their length.
// Inputs of different lengths are unequal (their lengths are not secret).
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);

// `n` bytes from the system's random generator; Internal when it fails,
// InvalidArgument for a negative `n`.
absl::StatusOr<std::string> RandomBytes(int n);

}  // namespace tessera

#endif  // TESSERA_COMMON_CRYPTO_H_
