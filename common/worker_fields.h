// What a worker may say about itself: the limits on the fields of its
// registration, shared by tessera-worker (which checks its flags at startup)
// and the coordinator (which refuses a call that breaks them with
// InvalidArgument, before it stores or logs anything of it).
//
// A worker's name names its credential file (worker-NAME.credential in its
// state dir), its cgroup and its rows; it is [A-Za-z0-9][A-Za-z0-9._-]*, which
// every hostname fits.
//
// Thread-safe: constants and free functions.
#ifndef TESSERA_COMMON_WORKER_FIELDS_H_
#define TESSERA_COMMON_WORKER_FIELDS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tessera {

inline constexpr size_t kMaxWorkerNameBytes = 128;
inline constexpr size_t kMaxWorkerHostnameBytes = 255;  // a DNS name's limit
inline constexpr size_t kMaxDeviceKindBytes = 32;
inline constexpr int32_t kMaxWorkerSlots = 4096;
// A per-worker credential, as presented ("tsr_worker_" and 64 hex digits).
inline constexpr size_t kMaxWorkerCredentialBytes = 256;
// Ranks one heartbeat may list (running, and exited but not yet acknowledged).
inline constexpr int kMaxHeartbeatRanks = 16384;
// The reason a worker gives for a rank it could not launch.
inline constexpr size_t kMaxLaunchErrorBytes = 4096;

// InvalidArgument unless `name` is 1-kMaxWorkerNameBytes bytes of
// [A-Za-z0-9._-] starting with a letter or digit.
inline absl::Status CheckWorkerName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxWorkerNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1-", kMaxWorkerNameBytes, " characters"));
  }
  const auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  bool ok = alnum(name[0]);
  for (char c : name) ok = ok && (alnum(c) || c == '.' || c == '_' || c == '-');
  if (!ok) {
    return absl::InvalidArgumentError(
        "name: must be letters, digits, '.', '_' and '-', starting with a letter or "
        "digit");
  }
  return absl::OkStatus();
}

// InvalidArgument unless `text` is at most `limit` bytes of printable ASCII
// without spaces (empty is fine); `field` names it in the message.
inline absl::Status CheckWorkerToken(absl::string_view field, absl::string_view text,
                                     size_t limit) {
  if (text.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": longer than ", limit, " bytes"));
  }
  for (char c : text) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera

#endif  // TESSERA_COMMON_WORKER_FIELDS_H_
