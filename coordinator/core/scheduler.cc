#include "coordinator/core/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// A worker's free slots, ascending, as the pass takes them.
struct FreeSlots {
  const std::string* worker;
  int32_t capacity = 0;
  std::vector<int32_t> slots;
};

// How many ranks each free-slot entry takes, or nullopt when the job does not
// fit the free slots under its policy and shape.
std::optional<std::vector<int32_t>> Shape(const PendingJob& job,
                                          const std::vector<FreeSlots>& free) {
  std::vector<size_t> order(free.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Most free first; ties keep inventory (name) order.
  std::stable_sort(order.begin(), order.end(), [&free](size_t a, size_t b) {
    return free[a].slots.size() > free[b].slots.size();
  });
  std::vector<int32_t> take(free.size(), 0);
  int32_t per_node = job.per_node;
  if (per_node == 0 && job.nodes > 0) per_node = job.world_size / job.nodes;
  if (per_node > 0) {
    int32_t nodes = job.world_size / per_node;
    for (size_t i : order) {
      if (nodes == 0) break;
      if (static_cast<int32_t>(free[i].slots.size()) >= per_node) {
        take[i] = per_node;
        --nodes;
      }
    }
    if (nodes > 0) return std::nullopt;
    return take;
  }
  int64_t total = 0;
  for (const FreeSlots& f : free) total += f.slots.size();
  if (total < job.world_size) return std::nullopt;
  if (job.policy == PlacementPolicy::kSpread) {
    int32_t left = job.world_size;
    while (left > 0) {
      for (size_t i : order) {
        if (left == 0) break;
        if (take[i] < static_cast<int32_t>(free[i].slots.size())) {
          ++take[i];
          --left;
        }
      }
    }
    return take;
  }
  // Pack: the single worker with the fewest free slots that holds the whole
  // gang, keeping larger holes for larger jobs; else the fullest workers first.
  std::optional<size_t> best;
  for (size_t i = 0; i < free.size(); ++i) {
    if (static_cast<int32_t>(free[i].slots.size()) >= job.world_size &&
        (!best || free[i].slots.size() < free[*best].slots.size())) {
      best = i;
    }
  }
  if (best) {
    take[*best] = job.world_size;
    return take;
  }
  int32_t left = job.world_size;
  for (size_t i : order) {
    take[i] = std::min<int32_t>(left, free[i].slots.size());
    left -= take[i];
  }
  return take;
}

// Whether the job could ever fit the alive workers as registered.
std::optional<std::string> NeverFits(const PendingJob& job,
                                     const std::vector<FreeSlots>& free,
                                     int64_t registered) {
  if (registered < job.world_size) {
    return absl::StrCat("needs ", job.world_size, " slots; ", registered, " registered");
  }
  int32_t per_node = job.per_node;
  if (per_node == 0 && job.nodes > 0) per_node = job.world_size / job.nodes;
  if (per_node > 0) {
    const int32_t nodes = job.world_size / per_node;
    int32_t big_enough = 0;
    for (const FreeSlots& f : free) big_enough += f.capacity >= per_node ? 1 : 0;
    if (big_enough < nodes) {
      return absl::StrCat("needs ", nodes, " workers with ", per_node, " slots each; ",
                          big_enough, " registered");
    }
  }
  return std::nullopt;
}

std::optional<std::string> InvalidShape(const PendingJob& job) {
  if (job.world_size <= 0) {
    return absl::StrCat("world size must be positive, got ", job.world_size);
  }
  if (job.nodes < 0 || job.per_node < 0) return "nodes and per_node must not be negative";
  if (job.nodes > 0 && job.per_node > 0 && job.nodes * job.per_node != job.world_size) {
    return absl::StrCat("nodes x per_node (", job.nodes, " x ", job.per_node,
                        ") must equal world size ", job.world_size);
  }
  if (job.nodes > 0 && job.world_size % job.nodes != 0) {
    return absl::StrCat("world size ", job.world_size, " does not divide into ",
                        job.nodes, " nodes");
  }
  if (job.per_node > 0 && job.world_size % job.per_node != 0) {
    return absl::StrCat("world size ", job.world_size, " is not a multiple of per_node ",
                        job.per_node);
  }
  return std::nullopt;
}

// Why an owner limit holds the job, or nothing. `placed` counts the ranks each
// owner holds, this pass's placements included.
std::optional<std::string> OwnerLimit(const PendingJob& job,
                                      const std::map<std::string, int32_t>& placed,
                                      const std::set<std::string>& waiting_owners,
                                      int64_t registered,
                                      const SchedulerOptions& options) {
  if (job.exempt) return std::nullopt;
  auto it = placed.find(job.owner);
  const int64_t holds = it == placed.end() ? 0 : it->second;
  if (options.max_ranks_per_owner > 0 &&
      holds + job.world_size > options.max_ranks_per_owner) {
    return absl::StrCat("owner ", job.owner, " holds ", holds, " of at most ",
                        options.max_ranks_per_owner,
                        " ranks per user (--max-running-ranks)");
  }
  const bool others_wait =
      waiting_owners.size() > 1 ||
      (waiting_owners.size() == 1 && !waiting_owners.contains(job.owner));
  if (options.max_slot_share < 1.0 && others_wait && registered > 0 &&
      static_cast<double>(holds + job.world_size) >
          options.max_slot_share * static_cast<double>(registered)) {
    return absl::StrCat("owner ", job.owner, " would hold ", holds + job.world_size,
                        " of ", registered, " slots, over the per-user share of ",
                        options.max_slot_share, " while others wait (--max-slot-share)");
  }
  return std::nullopt;
}

}  // namespace

ScheduleResult Schedule(const std::vector<PendingJob>& queue_in,
                        const std::vector<WorkerInventory>& inventory, absl::Time now,
                        const SchedulerOptions& options) {
  std::vector<FreeSlots> free;
  int64_t registered = 0;
  for (const WorkerInventory& worker : inventory) {
    if (!worker.alive || worker.slots <= 0) continue;
    registered += worker.slots;
    std::set<int32_t> used(worker.used_slots.begin(), worker.used_slots.end());
    FreeSlots entry{&worker.worker, worker.slots, {}};
    for (int32_t slot = 0; slot < worker.slots; ++slot) {
      if (used.count(slot) == 0) entry.slots.push_back(slot);
    }
    free.push_back(std::move(entry));
  }

  std::vector<PendingJob> queue = queue_in;
  std::stable_sort(queue.begin(), queue.end(),
                   [](const PendingJob& a, const PendingJob& b) {
                     if (a.priority != b.priority) return a.priority > b.priority;
                     if (a.fair_share != b.fair_share) return a.fair_share > b.fair_share;
                     return a.queued_since < b.queued_since;
                   });

  ScheduleResult result;
  std::map<std::string, int32_t> placed = options.placed_by_owner;
  std::set<std::string> waiting_owners;
  for (const PendingJob& job : queue) waiting_owners.insert(job.owner);
  std::optional<int64_t> holder;  // a starving job that holds the queue
  for (const PendingJob& job : queue) {
    if (std::optional<std::string> bad = InvalidShape(job)) {
      result.pending_reasons[job.job_id] = *bad;
      continue;
    }
    if (std::optional<std::string> never = NeverFits(job, free, registered)) {
      result.pending_reasons[job.job_id] = *never;
      result.lacking_workers.insert(job.job_id);
      continue;
    }
    if (holder) {
      result.pending_reasons[job.job_id] =
          absl::StrCat("waiting behind job ", *holder, ", which has waited longest");
      continue;
    }
    if (std::optional<std::string> limit =
            OwnerLimit(job, placed, waiting_owners, registered, options)) {
      result.pending_reasons[job.job_id] = *limit;
      continue;
    }
    std::optional<std::vector<int32_t>> take = Shape(job, free);
    if (!take) {
      int64_t free_total = 0;
      for (const FreeSlots& worker : free) free_total += worker.slots.size();
      result.pending_reasons[job.job_id] =
          absl::StrCat("needs ", job.world_size, " slots; ", free_total, " free");
      result.lacking_workers.insert(job.job_id);
      if (now - job.queued_since >= options.reserve_after) holder = job.job_id;
      continue;
    }
    Placement placement;
    placement.job_id = job.job_id;
    int32_t rank = 0;
    for (size_t i = 0; i < free.size(); ++i) {
      for (int32_t local_rank = 0; local_rank < (*take)[i]; ++local_rank) {
        placement.ranks.push_back(RankPlacement{.rank = rank++,
                                                .worker = *free[i].worker,
                                                .slot = free[i].slots[local_rank],
                                                .local_rank = local_rank});
      }
      free[i].slots.erase(free[i].slots.begin(), free[i].slots.begin() + (*take)[i]);
    }
    result.placements.push_back(std::move(placement));
    placed[job.owner] += job.world_size;
  }
  return result;
}

}  // namespace tessera
