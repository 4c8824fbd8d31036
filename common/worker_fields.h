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
// LocalRank.exit_detail: the worker sends at most 1,000 bytes (worker/exit_detail.h);
// a heartbeat with more is refused.
inline constexpr size_t kMaxExitDetailBytes = 4096;
// The GPUs a worker lists (one slot each): at most kMaxWorkerSlots ids, each a
// CUDA_VISIBLE_DEVICES id (an index, or a GPU-/MIG- UUID) of at most this many
// bytes of printable ASCII without spaces or commas.
inline constexpr size_t kMaxGpuIdBytes = 96;

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

// InvalidArgument unless `ids` (the gpu_ids of a registration: any container
// of strings) holds at most kMaxWorkerSlots ids, each 1-kMaxGpuIdBytes bytes of
// printable ASCII without spaces or commas.
template <typename Ids>
absl::Status CheckGpuIds(const Ids& ids) {
  if (ids.size() > static_cast<size_t>(kMaxWorkerSlots)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_ids: ", ids.size(), " listed, limit ", kMaxWorkerSlots));
  }
  for (const auto& id : ids) {
    if (absl::Status s = CheckWorkerToken("gpu_ids", id, kMaxGpuIdBytes); !s.ok()) {
      return s;
    }
    if (absl::string_view(id).empty() ||
        absl::string_view(id).find(',') != absl::string_view::npos) {
      return absl::InvalidArgumentError("gpu_ids: an id is empty or holds a comma");
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera

#endif  // TESSERA_COMMON_WORKER_FIELDS_H_
