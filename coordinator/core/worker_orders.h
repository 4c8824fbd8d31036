// The orders a heartbeat reply carries to a worker: launch a rank, stop a rank
// (a KillOrder also names an exit the coordinator acknowledges). Built from the
// coordinator's records; deciding which orders a worker gets is WorkerSessions'.
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COORDINATOR_CORE_WORKER_ORDERS_H_
#define TESSERA_COORDINATOR_CORE_WORKER_ORDERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Names rank `rank` of attempt `attempt` of the job.
tessera::v1::KillOrder KillOrderFor(int64_t job_id, int32_t attempt, int32_t rank);
// Names the rank that `reported` describes.
tessera::v1::KillOrder KillOrderFor(const tessera::v1::LocalRank& reported);

// The order that launches `ranks[r]`, a rank of the job's current attempt;
// `local_rank` is its index among the job's ranks on the same worker. A
// restarted attempt of a job with a checkpoint directory resumes from it.
tessera::v1::LaunchOrder LaunchOrderFor(const JobRecord& job,
                                        const std::vector<RankRecord>& ranks, size_t r,
                                        int32_t local_rank);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_WORKER_ORDERS_H_
