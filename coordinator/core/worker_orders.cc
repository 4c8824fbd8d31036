#include "coordinator/core/worker_orders.h"

#include "common/job_spec.h"

namespace tessera {

v1::KillOrder KillOrderFor(int64_t job_id, int32_t attempt, int32_t rank) {
  v1::KillOrder order;
  order.set_job_id(job_id);
  order.set_attempt(attempt);
  order.set_rank(rank);
  return order;
}

v1::KillOrder KillOrderFor(const v1::LocalRank& reported) {
  return KillOrderFor(reported.job_id(), reported.attempt(), reported.rank());
}

v1::LaunchOrder LaunchOrderFor(const JobRecord& job, const std::vector<RankRecord>& ranks,
                               size_t r, int32_t local_rank) {
  const RankRecord& rank = ranks[r];
  v1::LaunchOrder order;
  order.set_job_id(job.id);
  order.set_attempt(job.attempt);
  order.set_rank(rank.rank);
  order.set_world_size(static_cast<int32_t>(ranks.size()));
  order.set_local_rank(local_rank);
  order.set_slot(rank.slot);
  for (const RankRecord& peer : ranks) {
    if (peer.worker == rank.worker) order.add_local_slots(peer.slot);
  }
  *order.mutable_trainer() = job.spec.trainer();
  order.set_run_as(job.owner);
  *order.mutable_env() = job.spec.env();
  // Validated at submit; a spec stored before the key existed has none.
  order.set_memory_per_rank_bytes(MemoryPerRankBytes(job.spec).value_or(0));
  // A restarted attempt continues from the job's latest checkpoint.
  if (job.attempt > 1 && !job.spec.trainer().checkpoint_dir().empty()) {
    order.mutable_trainer()->set_resume(true);
  }
  return order;
}

}  // namespace tessera
