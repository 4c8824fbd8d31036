// Scheduler: a pure function from (queue, inventory) to gang placements.
//
// First-fit gang placement: jobs are considered in queue order; a job is placed
// only when every one of its ranks gets a free slot, possibly spanning several
// workers, and the slots it takes are no longer free for later jobs in the same
// pass. A job that cannot be placed gets a human-readable pending reason, e.g.
// "needs 4 slots; 2 registered" when the cluster is too small, or
// "needs 4 slots; 1 free" when it must wait for others.
//
// Thread-safety: stateless; safe from any thread.
#ifndef TESSERA_COORDINATOR_SCHEDULER_H_
#define TESSERA_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera {

struct PendingJob {
  int64_t job_id = 0;
  int32_t world_size = 0;
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
};

// `queue` in priority order; `inventory` in worker-name order.
ScheduleResult Schedule(const std::vector<PendingJob>& queue,
                        const std::vector<WorkerInventory>& inventory);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_SCHEDULER_H_
