// JobRequests: what users ask of jobs, over the ClusterState: submit, read
// one job, list jobs, read a job's metrics and logs, and cancel. Every read
// and action acts for a Caller: a job the caller may not see (Caller::MaySee)
// is NotFound, as if it did not exist. Active jobs are answered from memory;
// ended ones from the store, after flushing the writer. The job service, the
// HTTP API and the sweep manager use this class for their job calls.
//
// Durability: a job is written to the store before Submit returns.
//
// Thread-safety: every method is safe from any thread; it takes the state's
// mutex itself and never holds it across store I/O.
#ifndef TESSERA_COORDINATOR_CORE_JOB_REQUESTS_H_
#define TESSERA_COORDINATOR_CORE_JOB_REQUESTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/core/caller.h"
#include "coordinator/core/change_notifier.h"
#include "coordinator/core/cluster_state.h"
#include "coordinator/core/job_lifecycle.h"
#include "coordinator/core/job_placer.h"
#include "coordinator/core/user_quotas.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Where a job comes from: a sweep point, or (all zero) a plain submit, and who
// submitted it.
struct JobOrigin {
  int64_t sweep_id = 0;
  int32_t sweep_point = 0;
  // Who submitted it: the user token's name (empty without authentication).
  std::string owner;
  // Whether the submitter is an admin: exempt from the user limits.
  bool admin = false;
};

// A page of ListJobs.
struct JobList {
  std::vector<tessera::v1::Job> jobs;
  int64_t next_before_id = 0;  // JobFilter::before_id of the next page; 0: none
};

class JobRequests {
 public:
  // None is owned; each must outlive this.
  JobRequests(ClusterState* state, JobLifecycle* lifecycle, JobPlacer* placer,
              UserQuotas* quotas)
      : state_(*state), lifecycle_(*lifecycle), placer_(*placer), quotas_(*quotas) {}

  JobRequests(const JobRequests&) = delete;
  JobRequests& operator=(const JobRequests&) = delete;

  // Validates and stores a job, then tries to place it. Returns the job id; a
  // repeated `client_request_id` of the same owner returns the first job's id.
  // ResourceExhausted past the owner's queued-jobs limit; PermissionDenied for
  // a non-admin's priority above the cap.
  absl::StatusOr<int64_t> Submit(const tessera::v1::JobSpec& spec,
                                 const std::string& spec_yaml,
                                 const std::string& client_request_id,
                                 const JobOrigin& origin = JobOrigin())
      ABSL_LOCKS_EXCLUDED(state_.mu);

  absl::StatusOr<tessera::v1::Job> GetJob(const Caller& caller, int64_t job_id)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // Newest first, at most filter.limit (0: default_list_limit; at most
  // max_list_limit unless the caller is an admin). A non-admin sees only their
  // own jobs. Lists carry no spec_yaml and no env values.
  absl::StatusOr<JobList> ListJobs(const Caller& caller, JobFilter filter = {})
      ABSL_LOCKS_EXCLUDED(state_.mu);
  absl::StatusOr<std::vector<tessera::v1::MetricPoint>> GetMetrics(
      const Caller& caller, const tessera::v1::GetMetricsRequest& request)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  absl::StatusOr<tessera::v1::GetLogsResponse> GetLogs(
      const Caller& caller, const tessera::v1::GetLogsRequest& request)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // NotFound unless the caller may see the job.
  absl::Status CheckVisible(const Caller& caller, int64_t job_id)
      ABSL_LOCKS_EXCLUDED(state_.mu);

  // Stops every rank of the job and records CANCELLED; returns the job's state
  // afterwards. FailedPrecondition when the job had already ended.
  absl::StatusOr<tessera::v1::JobState> CancelJob(const Caller& caller, int64_t job_id)
      ABSL_LOCKS_EXCLUDED(state_.mu);

  // Bumped whenever a job, worker, metric or log changes; live views wait on it.
  ChangeNotifier& changes() { return state_.changes; }

 private:
  // Submit, once stored: adopts the new job and tries to place it.
  void AddSubmittedLocked(int64_t id, const JobRecord& submitted, const JobOrigin& origin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // GetJob for an active job, or one reaped but not yet stored; nullopt when
  // the store has to answer.
  std::optional<absl::StatusOr<tessera::v1::Job>> GetFromMemory(const Caller& caller,
                                                                int64_t job_id)
      ABSL_LOCKS_EXCLUDED(state_.mu);
  // CancelJob under the lock: the job's state when it had already ended,
  // nullopt when it was cancelled here or is not active.
  std::optional<tessera::v1::JobState> CancelActiveLocked(
      const Caller& caller, int64_t job_id, RendezvousRounds::Releases& releases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);
  // The owner of a job, active or stored; NotFound when there is none.
  absl::StatusOr<std::string> OwnerOf(int64_t job_id) ABSL_LOCKS_EXCLUDED(state_.mu);
  // Marks the jobs in `list` whose current state is not yet stored, and
  // replaces stored jobs with the snapshots of those reaped unstored.
  void MarkUnstoredLocked(std::vector<tessera::v1::Job>& list) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.mu);

  ClusterState& state_;      // Not owned.
  JobLifecycle& lifecycle_;  // Not owned.
  JobPlacer& placer_;        // Not owned.
  UserQuotas& quotas_;       // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_JOB_REQUESTS_H_
