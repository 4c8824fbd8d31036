#include "coordinator/scheduler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// A worker's free slots, ascending, as the pass takes them.
struct FreeSlots {
  const std::string* worker;
  std::vector<int32_t> slots;
};

}  // namespace

ScheduleResult Schedule(const std::vector<PendingJob>& queue,
                        const std::vector<WorkerInventory>& inventory) {
  std::vector<FreeSlots> free;
  int64_t registered = 0;
  for (const WorkerInventory& worker : inventory) {
    if (!worker.alive || worker.slots <= 0) continue;
    registered += worker.slots;
    std::set<int32_t> used(worker.used_slots.begin(), worker.used_slots.end());
    FreeSlots entry{&worker.worker, {}};
    for (int32_t slot = 0; slot < worker.slots; ++slot) {
      if (used.count(slot) == 0) entry.slots.push_back(slot);
    }
    free.push_back(std::move(entry));
  }

  ScheduleResult result;
  for (const PendingJob& job : queue) {
    if (job.world_size <= 0) {
      result.pending_reasons[job.job_id] =
          absl::StrCat("world size must be positive, got ", job.world_size);
      continue;
    }
    int64_t free_total = 0;
    for (const FreeSlots& worker : free) free_total += worker.slots.size();
    if (registered < job.world_size) {
      result.pending_reasons[job.job_id] =
          absl::StrCat("needs ", job.world_size, " slots; ", registered, " registered");
      continue;
    }
    if (free_total < job.world_size) {
      result.pending_reasons[job.job_id] =
          absl::StrCat("needs ", job.world_size, " slots; ", free_total, " free");
      continue;
    }

    // Ranks fill workers in inventory order, each worker's free slots lowest
    // first, so a gang spans as few workers as the order allows and rank numbers
    // run contiguously within each worker.
    Placement placement;
    placement.job_id = job.job_id;
    int32_t rank = 0;
    for (FreeSlots& worker : free) {
      int32_t take = std::min<int64_t>(worker.slots.size(), job.world_size - rank);
      for (int32_t local_rank = 0; local_rank < take; ++local_rank) {
        placement.ranks.push_back(RankPlacement{.rank = rank++,
                                                .worker = *worker.worker,
                                                .slot = worker.slots[local_rank],
                                                .local_rank = local_rank});
      }
      worker.slots.erase(worker.slots.begin(), worker.slots.begin() + take);
      if (rank == job.world_size) break;
    }
    result.placements.push_back(std::move(placement));
  }
  return result;
}

}  // namespace tessera
