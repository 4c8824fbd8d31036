#include "coordinator/core/cluster_state.h"

#include <utility>

namespace tessera {
namespace {

WorkerRegistryOptions RegistryOptions(const JobManagerOptions& options) {
  return WorkerRegistryOptions{.heartbeat_interval = options.heartbeat_interval,
                               .suspect_after = options.worker_suspect_after,
                               .dead_after = options.worker_dead_after};
}

}  // namespace

ClusterState::ClusterState(Store* store, StoreWriter* writer, const Clock* clock,
                           JobManagerOptions options)
    : store(store),
      writer(writer),
      clock(clock),
      options(std::move(options)),
      outputs(store, writer, &changes, this->options.max_points_per_report,
              RankOutputs::Limits{this->options.job_limits.max_metric_rows,
                                  this->options.job_limits.max_log_bytes,
                                  this->options.job_limits.max_metric_names}),
      workers(writer, clock, RegistryOptions(this->options)),
      usage(this->options.usage_half_life) {}

std::map<std::string, std::vector<int32_t>> ClusterState::UsedSlotsLocked() const {
  std::map<std::string, std::vector<int32_t>> used;
  for (const auto& [id, job] : jobs) job.AddUsedSlots(used);
  return used;
}

void RunReleases(RendezvousRounds::Releases& releases) {
  for (auto& [callback, result] : releases) callback(std::move(result));
  releases.clear();
}

}  // namespace tessera
