#include "coordinator/core/job_manager.h"

#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {

JobManager::JobManager(Store* store, StoreWriter* writer, const Clock* clock,
                       JobManagerOptions options)
    : state_(store, writer, clock, std::move(options)),
      lifecycle_(&state_),
      quotas_(&state_),
      placer_(&state_, &lifecycle_, &quotas_),
      ranks_(&state_, &lifecycle_),
      workers_(&state_, &lifecycle_, &placer_, &quotas_),
      jobs_(&state_, &lifecycle_, &placer_, &quotas_),
      view_(&state_) {}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, state_.store->ListWorkers());
  ASSIGN_OR_RETURN(std::vector<JobRecord> active, state_.store->ListActiveJobs());
  ASSIGN_OR_RETURN(std::vector<UsageRecord> usage, state_.store->ListUsage());
  absl::MutexLock lock(&state_.mu);
  quotas_.RestoreLocked(usage);
  state_.workers.Recover(std::move(workers));
  for (auto& rec : active) RETURN_IF_ERROR(lifecycle_.AdoptLocked(std::move(rec)));
  spdlog::info("recovered {} workers and {} active jobs from the store",
               state_.workers.size(), state_.jobs.size());
  placer_.ScheduleLocked();
  return absl::OkStatus();
}

void JobManager::Tick() {
  RendezvousRounds::Releases releases;
  std::vector<UsageRecord> usage;
  state_.writer->BelowReserve();  // refreshes the store's mode; statvfs, before the lock
  {
    absl::MutexLock lock(&state_.mu);
    const absl::Time now = state_.clock->Now();
    lifecycle_.SyncWithStoreLocked();
    usage = quotas_.AccrueAndSnapshotLocked();
    bool changed = workers_.DeclareSilentWorkersDeadLocked(&releases);
    changed |= lifecycle_.ExpireLostRanksLocked(now);
    changed |= ranks_.FailTimedOutRendezvousLocked(now, &releases);
    changed |= lifecycle_.WatchRunningLocked(now, &releases);
    changed |= workers_.EnforceDrainsLocked(now, &releases);
    if (changed) {
      lifecycle_.ReapLocked();
      placer_.ScheduleLocked();
    }
  }
  RunReleases(releases);
  quotas_.SaveUsage(usage);
}

}  // namespace tessera
