#include "worker/memory_limit.h"

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace tessera {
namespace {

std::string LimitPrefix(int64_t bytes) {
  return absl::StrCat("tessera-worker: memory_per_rank ", FormatByteSize(bytes), ": ");
}

RankMemoryLimit RlimitData(int64_t bytes, absl::string_view why_not_cgroup) {
  RankMemoryLimit limit;
  limit.bytes = bytes;
  limit.mechanism = MemoryMechanism::kRlimitData;
  limit.log_line =
      absl::StrCat(LimitPrefix(bytes), "enforced by RLIMIT_DATA (", why_not_cgroup, ")");
  return limit;
}

}  // namespace

RankMemoryLimit ChooseMemoryLimit(int64_t bytes, CgroupTree* cgroups,
                                  const std::string& attempt_group, int32_t rank) {
  if (bytes <= 0) return RankMemoryLimit{};
  if (cgroups == nullptr || attempt_group.empty()) {
    return RlimitData(bytes, "the worker runs its ranks without cgroups");
  }
  if (!cgroups->HasMemoryController()) {
    return RlimitData(bytes, absl::StrCat("the cgroup v2 memory controller is not "
                                          "delegated to ",
                                          cgroups->root()));
  }
  absl::StatusOr<std::string> group =
      cgroups->EnsureRankGroup(attempt_group, rank, bytes);
  if (!group.ok()) {
    return RlimitData(bytes, absl::StrCat("no memory.max: ", group.status().message()));
  }
  RankMemoryLimit limit;
  limit.bytes = bytes;
  limit.mechanism = MemoryMechanism::kCgroup;
  limit.group = *group;
  limit.log_line =
      absl::StrCat(LimitPrefix(bytes), "enforced by memory.max on cgroup ", *group);
  return limit;
}

bool LogShowsAllocationFailure(std::string_view log_tail) {
  for (std::string_view marker :
       {"std::bad_alloc", "can't allocate memory", "Cannot allocate memory"}) {
    if (log_tail.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

std::string OutOfMemoryReason(int32_t rank, const RankMemoryLimit& limit, bool failed,
                              int64_t oom_kills, std::string_view log_tail) {
  if (limit.mechanism == MemoryMechanism::kNone || !failed) return "";
  std::string how;
  if (limit.mechanism == MemoryMechanism::kCgroup && oom_kills > 0) {
    how = "the kernel's OOM killer ended it under memory.max";
  } else if (LogShowsAllocationFailure(log_tail)) {
    how = limit.mechanism == MemoryMechanism::kRlimitData
              ? "an allocation failed under RLIMIT_DATA"
              : "an allocation failed under memory.max";
  } else {
    return "";
  }
  return absl::StrCat("rank ", rank, " exceeded memory_per_rank ",
                      FormatByteSize(limit.bytes), " (out of memory: ", how, ")");
}

}  // namespace tessera
