#include "worker/trainer/model/param_hash.h"

#include <string>

#include "absl/strings/str_format.h"

namespace tessera::trainer {

std::string Fnv1a64::Hex() const { return absl::StrFormat("%016x", state_); }

}  // namespace tessera::trainer
