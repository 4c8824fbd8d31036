// RankMemoryLimit: how the worker holds a rank to its job's memory_per_rank,
// and how it tells that a rank ended by running out of it.
//
// Where the worker's cgroup tree has the memory controller (cgroup.h,
// HasMemoryController), the rank runs in a group of its own with memory.max
// set: past it the kernel's OOM killer ends the rank (SIGKILL) and counts it
// in the group's memory.events. Elsewhere (no cgroup v2, the controller not
// delegated, --no-cgroups) the rank starts with RLIMIT_DATA at the limit: an
// allocation past it fails inside the trainer (std::bad_alloc, LibTorch's
// "can't allocate memory"), which ends the rank with that message in its
// log. Either way the rank's log says first which mechanism holds it, and
// the rank's exit reason reads "rank 1 exceeded memory_per_rank 3 GiB (out of
// memory: ...)": the coordinator then stops the attempt's other ranks as for
// any failed rank.
//
//   RankMemoryLimit limit = ChooseMemoryLimit(bytes, cgroups, attempt_group, rank);
//   ... launch; on exit:
//   std::string why = OutOfMemoryReason(rank, limit, failed, oom_kills, log_tail);
//
// RLIMIT_DATA bounds the address space a rank has written to or may write
// (heap, private mappings, thread stacks), not its resident pages: it bites
// at or before memory.max would.
//
// Thread-safety: free functions; ChooseMemoryLimit writes to the cgroup tree
// and has CgroupTree's contract.
#ifndef TESSERA_WORKER_MEMORY_LIMIT_H_
#define TESSERA_WORKER_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "worker/cgroup.h"

namespace tessera {

enum class MemoryMechanism {
  kNone,        // no limit asked for
  kCgroup,      // memory.max on the rank's own cgroup
  kRlimitData,  // RLIMIT_DATA on the rank's process
};

struct RankMemoryLimit {
  int64_t bytes = 0;  // memory_per_rank; 0: none
  MemoryMechanism mechanism = MemoryMechanism::kNone;
  // kCgroup: the rank's own group, which it starts in.
  std::string group;
  // The line for the rank's log, "tessera-worker: memory_per_rank 3 GiB:
  // memory.max on cgroup ..." or "...: RLIMIT_DATA (why not memory.max)";
  // empty for kNone.
  std::string log_line;
};

// Picks the mechanism for a rank limited to `bytes` (0: none): memory.max on
// a rank group below `attempt_group` when `cgroups` (may be null) has the
// memory controller and the group can be set up, RLIMIT_DATA otherwise.
RankMemoryLimit ChooseMemoryLimit(int64_t bytes, CgroupTree* cgroups,
                                  const std::string& attempt_group, int32_t rank);

// Whether a log's tail shows an allocation that failed: std::bad_alloc,
// LibTorch's "can't allocate memory", ENOMEM's "Cannot allocate memory".
bool LogShowsAllocationFailure(std::string_view log_tail);

// The reason a rank limited by `limit` ended out of memory, e.g. "rank 1
// exceeded memory_per_rank 3 GiB (out of memory: the kernel's OOM killer
// ended it under memory.max)"; empty when it did not: no limit, a clean exit
// (`failed` false), or neither an OOM kill in its group (`oom_kills`) nor an
// allocation failure in its log tail.
std::string OutOfMemoryReason(int32_t rank, const RankMemoryLimit& limit, bool failed,
                              int64_t oom_kills, std::string_view log_tail);

}  // namespace tessera

#endif  // TESSERA_WORKER_MEMORY_LIMIT_H_
