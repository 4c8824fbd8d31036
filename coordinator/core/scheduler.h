// Scheduler: a pure function from (queue, inventory, now) to gang placements.
//
// Jobs are considered by priority (higher first), then by their owner's
// fair-share factor (higher first: owners with less recent use; see
// fair_share.h), then by how long they have been queued, then in the order
// given. A job is placed only when every one of
// its ranks gets a free slot (all-or-nothing), possibly spanning workers, and
// the slots it takes are no longer free for later jobs in the same pass.
//
// Placement policies: "pack" puts the gang on as few workers as possible (a
// single worker when one fits, choosing the one with the fewest free slots that
// still fits); "spread" deals ranks round-robin over the workers with the most
// free slots. `nodes` / `per_node` fix the shape: 4 ranks as 1x4, 2x2 or 4x1.
// Ranks are numbered contiguously within each worker.
//
// Backfill: a job that does not fit lets later, smaller jobs start, until it has
// waited `reserve_after`; from then on nothing behind it starts, so running
// jobs drain and it cannot starve.
//
// A job that cannot be placed gets a human-readable pending reason, e.g.
// "needs 4 slots; 2 registered" when the cluster is too small, or
// "needs 4 slots; 1 free" when it must wait for others.
//
// Owner limits: a job whose owner already holds `max_ranks_per_owner` ranks,
// or would hold more than `max_slot_share` of the registered slots while
// another owner's job waits, is held with a reason naming the limit. Jobs of
// exempt owners (admins) are not limited.
//
// Thread-safety: stateless; safe from any thread.
#ifndef TESSERA_COORDINATOR_CORE_SCHEDULER_H_
#define TESSERA_COORDINATOR_CORE_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera {

enum class PlacementPolicy { kPack, kSpread };

struct PendingJob {
  int64_t job_id = 0;
  int32_t world_size = 0;
  int32_t priority = 0;                            // higher runs first
  absl::Time queued_since = absl::InfinitePast();  // FIFO within a priority
  PlacementPolicy policy = PlacementPolicy::kPack;
  int32_t nodes = 0;      // exact number of workers; 0: any
  int32_t per_node = 0;   // ranks on each worker; 0: any
  std::string owner;      // who submitted it ("" without authentication)
  double fair_share = 1;  // the owner's fair-share factor; higher runs first
  bool exempt = false;    // the owner is an admin: no owner limits
};

struct SchedulerOptions {
  // How long a blocked job lets later jobs backfill before it holds the queue.
  absl::Duration reserve_after = absl::Minutes(10);
  // Owner limits (0 / 1.0: none) and the ranks each owner already holds.
  int32_t max_ranks_per_owner = 0;
  double max_slot_share = 1.0;
  std::map<std::string, int32_t> placed_by_owner;
};

struct WorkerInventory {
  std::string worker;
  int32_t slots = 0;                // slots 0..slots-1
  std::vector<int32_t> used_slots;  // slots taken by running ranks
  bool alive = true;                // dead workers take no new ranks
};

struct RankPlacement {
  int32_t rank = 0;
  std::string worker;
  int32_t slot = 0;
  int32_t local_rank = 0;  // index of this rank among the job's ranks on its worker
};

struct Placement {
  int64_t job_id = 0;
  std::vector<RankPlacement> ranks;  // ordered by rank
};

struct ScheduleResult {
  std::vector<Placement> placements;
  std::map<int64_t, std::string> pending_reasons;  // job id -> reason
  // Jobs left waiting only because the workers lack slots (not held by a
  // limit or behind the queue's holder): more workers would start them.
  std::set<int64_t> lacking_workers;
};

// `inventory` in worker-name order. Without `now`, no job ever holds the queue.
ScheduleResult Schedule(const std::vector<PendingJob>& queue,
                        const std::vector<WorkerInventory>& inventory,
                        absl::Time now = absl::InfinitePast(),
                        const SchedulerOptions& options = {});

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SCHEDULER_H_
