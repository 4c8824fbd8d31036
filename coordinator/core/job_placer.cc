#include "coordinator/core/job_placer.h"

#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

}  // namespace

void JobPlacer::ScheduleLocked() {
  std::vector<PendingJob> queue = QueueLocked();
  if (queue.empty()) return;
  ScopedLatency latency(state_.scheduling_latency);
  quotas_.AccrueUsageLocked();
  std::set<std::string> owners;
  for (const PendingJob& job : queue) owners.insert(job.owner);
  const JobManagerOptions& o = state_.options;
  if (o.fair_share) {
    const std::map<std::string, double> factors = quotas_.FactorsLocked(owners);
    for (PendingJob& job : queue) job.fair_share = factors.at(job.owner);
  }
  SchedulerOptions options{.reserve_after = o.reserve_after,
                           .max_ranks_per_owner = o.user_limits.max_running_ranks,
                           .max_slot_share = o.user_limits.max_slot_share};
  for (const auto& [user, load] : quotas_.LoadByUserLocked()) {
    options.placed_by_owner[user] = load.placed_ranks;
  }
  std::vector<WorkerInventory> inventory =
      state_.workers.Inventory(state_.UsedSlotsLocked());
  queue = PlaceOnReservedLocked(std::move(queue), inventory, options);
  ScheduleResult result = Schedule(queue, inventory, state_.clock->Now(), options);
  for (const Placement& placement : result.placements) PlaceLocked(placement);
  state_.lacking_workers = result.lacking_workers;
  SlurmPoolManager* const slurm = state_.slurm.load();
  for (const auto& [id, reason] : result.pending_reasons) {
    std::optional<std::string> in_slurm;
    if (slurm != nullptr && state_.lacking_workers.contains(id)) {
      in_slurm = slurm->PendingReason(id);
    }
    SetPendingReasonLocked(state_.jobs.at(id), in_slurm.value_or(reason));
  }
}

std::vector<PendingJob> JobPlacer::PlaceOnReservedLocked(
    std::vector<PendingJob> queue, std::vector<WorkerInventory>& inventory,
    const SchedulerOptions& options) {
  SlurmPoolManager* const slurm = state_.slurm.load();
  const std::map<std::string, int64_t> reserved_workers =
      slurm == nullptr ? std::map<std::string, int64_t>() : slurm->ReservedWorkers();
  if (reserved_workers.empty()) return queue;
  // A job that caused a Slurm allocation is placed first on its workers,
  // which no other job gets while it waits.
  std::vector<PendingJob> rest;
  for (const PendingJob& job : queue) {
    std::vector<WorkerInventory> own = inventory;
    bool has_own = false;
    for (WorkerInventory& w : own) {
      auto it = reserved_workers.find(w.worker);
      const bool mine = it != reserved_workers.end() && it->second == job.job_id;
      has_own |= mine && w.alive;
      w.alive = w.alive && mine;
    }
    ScheduleResult one;
    if (has_own) one = Schedule({job}, own, state_.clock->Now(), options);
    if (one.placements.empty()) {
      rest.push_back(job);
      continue;
    }
    PlaceLocked(one.placements[0]);
    inventory = state_.workers.Inventory(state_.UsedSlotsLocked());
  }
  for (WorkerInventory& w : inventory) {
    if (reserved_workers.contains(w.worker)) w.alive = false;
  }
  return rest;
}

void JobPlacer::TickSlurm() {
  SlurmPoolManager* const slurm = state_.slurm.load();
  if (slurm == nullptr || !slurm->TickIfDue(*this)) return;
  {
    absl::MutexLock lock(&state_.mu);
    for (auto& [id, job] : state_.jobs) {
      if (job.record.state != v1::JOB_STATE_QUEUED) continue;
      if (std::optional<std::string> why = slurm->PendingReason(id)) {
        SetPendingReasonLocked(job, *why);
      }
    }
    ScheduleLocked();
  }
  state_.changes.Notify();
}

SlurmPoolSnapshot JobPlacer::SlurmSnapshot() {
  SlurmPoolSnapshot snapshot;
  absl::MutexLock lock(&state_.mu);
  for (const v1::Worker& w : state_.workers.List(state_.UsedSlotsLocked())) {
    if (w.pool().empty() || !state_.workers.Live(w.name())) continue;
    snapshot.workers.push_back(SlurmPoolWorker{.name = w.name(),
                                               .pool = w.pool(),
                                               .slurm_job_id = w.slurm_job_id(),
                                               .running_ranks = w.slots_used(),
                                               .draining = w.draining()});
  }
  for (const auto& [id, job] : state_.jobs) {
    if (job.record.state != v1::JOB_STATE_QUEUED ||
        !state_.lacking_workers.contains(id)) {
      continue;
    }
    const v1::JobSpec& spec = job.record.spec;
    snapshot.waiting.push_back(WaitingJob{.job_id = id,
                                          .world_size = spec.world_size(),
                                          .nodes = spec.nodes(),
                                          .per_node = spec.per_node(),
                                          .kind = SlurmNodeKindOf(spec.trainer()),
                                          .owner = job.record.owner});
  }
  return snapshot;
}

std::vector<PendingJob> JobPlacer::QueueLocked() {
  std::vector<PendingJob> queue;
  for (auto& [id, job] : state_.jobs) {
    if (job.record.state != v1::JOB_STATE_QUEUED) continue;
    // No next attempt while a rank of an earlier one may still run: the
    // same (job, rank) would run twice.
    const std::string hold = job.HoldReason(state_.clock->Now());
    if (!hold.empty()) {
      SetPendingReasonLocked(job, hold);
      continue;
    }
    const v1::JobSpec& spec = job.record.spec;
    queue.push_back(PendingJob{.job_id = id,
                               .world_size = spec.world_size(),
                               .priority = spec.priority(),
                               .queued_since = job.queued_at,
                               .policy = spec.placement() == "spread"
                                             ? PlacementPolicy::kSpread
                                             : PlacementPolicy::kPack,
                               .nodes = spec.nodes(),
                               .per_node = spec.per_node(),
                               .owner = job.record.owner,
                               .exempt = job.owner_admin});
  }
  return queue;
}

void JobPlacer::PlaceLocked(const Placement& placement) {
  ActiveJob& job = state_.jobs.at(placement.job_id);
  job.StartAttempt(placement, state_.clock->Now());
  std::vector<int32_t> local_ranks;
  for (const RankPlacement& rp : placement.ranks) local_ranks.push_back(rp.local_rank);
  state_.rendezvous.Open(placement.job_id, job.record.attempt, std::move(local_ranks));
  state_.writer->PutRanks(job.ranks);
  lifecycle_.TransitionLocked(
      job, v1::JOB_STATE_SCHEDULED,
      absl::StrCat("attempt ", job.record.attempt, " placed: ", job.PlacementText()));
}

void JobPlacer::SetPendingReasonLocked(ActiveJob& job, const std::string& reason) {
  if (job.record.pending_reason == reason) return;
  job.record.pending_reason = reason;
  job.record.updated_unix_ms = state_.NowMs();
  state_.writer->UpdateJob(job.record);
}

}  // namespace tessera
