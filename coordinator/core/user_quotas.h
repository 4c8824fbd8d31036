// UserQuotas: fair share and quotas over the ClusterState. It checks a
// submit against the owner's limits (priority cap, world size, queued jobs,
// memory per rank),
// charges placed ranks' slot-seconds to their owners (the usage that orders
// the queue, fair_share.h), answers GetShare, and restores and saves the
// usage across restarts. The scheduler (JobPlacer) reads the factors and each
// owner's load from it.
//
// Thread-safety: CheckSubmit and GetShare take the state's mutex; the
// `Locked` methods require it; SaveUsage does store I/O and must be called
// without it. It holds no state of its own.
#ifndef TESSERA_COORDINATOR_CORE_USER_QUOTAS_H_
#define TESSERA_COORDINATOR_CORE_USER_QUOTAS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "coordinator/core/caller.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/fair_share.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// One user's line in GetShare: their recent usage and fair-share factor.
struct UserShare {
  std::string user;
  double usage_slot_seconds = 0;  // decayed by the usage half-life
  double factor = 1;              // 1: no recent use; toward 0: heavy use
  int32_t running_ranks = 0;
  int32_t queued_jobs = 0;
  // The memory_per_rank limits of the user's placed ranks, summed.
  int64_t running_memory_limit_bytes = 0;
  // --max-memory-per-rank as it applies to this user (0: none; admins: none).
  int64_t max_memory_per_rank_bytes = 0;
};

class UserQuotas {
 public:
  // `state` is not owned and must outlive this.
  explicit UserQuotas(ClusterState* state) : state_(*state) {}

  UserQuotas(const UserQuotas&) = delete;
  UserQuotas& operator=(const UserQuotas&) = delete;

  // Submit's per-user limits for a job of `owner`: PermissionDenied for a
  // priority above the cap, ResourceExhausted past the running-ranks or
  // queued-jobs limit, or for a memory_per_rank above (or, under a cap,
  // without) --max-memory-per-rank. Admins are exempt.
  absl::Status CheckSubmit(const tessera::v1::JobSpec& spec, const std::string& owner,
                           bool admin) ABSL_LOCKS_EXCLUDED(state_.mu);

  // Usage and fair-share factor per user: every user for an admin, the
  // caller's own line otherwise.
  std::vector<UserShare> GetShare(const Caller& caller) ABSL_LOCKS_EXCLUDED(state_.mu);

  // Per owner: ranks placed and jobs queued.
  std::map<std::string, UserLoad> LoadByUserLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Charges placed ranks' slot-seconds to their owners up to now.
  void AccrueUsageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // The fair-share factors now of every user with usage and of `owners`.
  std::map<std::string, double> FactorsLocked(const std::set<std::string>& owners) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  // Recover: the usage as stored; charging starts from now.
  void RestoreLocked(const std::vector<UsageRecord>& usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Tick: accrues, and when the save interval has passed returns the usage
  // to save (empty otherwise).
  std::vector<UsageRecord> AccrueAndSnapshotLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // Writes a snapshot to the store; a failure is logged (usage is only for
  // ordering: a save lost costs little).
  void SaveUsage(const std::vector<UsageRecord>& usage) ABSL_LOCKS_EXCLUDED(state_.mu);

 private:
  // Per owner: the memory_per_rank limits of their placed ranks, summed.
  std::map<std::string, int64_t> MemoryLimitsByUserLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  ClusterState& state_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_USER_QUOTAS_H_
