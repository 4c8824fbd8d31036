// SweepManager: runs scaling studies. A sweep is stored in the sweeps table
// before Submit answers; its points are ordinary jobs, submitted through
// JobRequests with a request id derived from (sweep, point), so a point is never
// submitted twice, even across a coordinator restart. Tick(), run by the
// coordinator's monitor thread, keeps up to max_parallel points active and
// records the sweep's end once every point has ended. The sweep's progress lives
// only in the store (the sweep row and its jobs), so a restarted coordinator
// simply carries on.
//
// Report() computes per-point figures (epoch time, speedup, efficiency,
// communication share, accuracy) from the stored metrics of the points' jobs;
// sweep_report.h builds it, and docs/api.md defines the figures.
//
// Thread-safety: safe from any thread. One mutex serialises the operations that
// advance sweeps; it is taken before the JobManager's, never the other way round.
#ifndef TESSERA_COORDINATOR_CORE_SWEEP_MANAGER_H_
#define TESSERA_COORDINATOR_CORE_SWEEP_MANAGER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "coordinator/core/job_requests.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class SweepManager {
 public:
  // `store`, `jobs` and `clock` are not owned and must outlive the manager.
  SweepManager(Store* store, JobRequests* jobs, const Clock* clock, SpecLimits limits);

  SweepManager(const SweepManager&) = delete;
  SweepManager& operator=(const SweepManager&) = delete;

  // Finds the sweeps still running in the store. Call once, before serving.
  absl::Status Recover();

  // Validates and stores the sweep, then submits its first points. A repeated
  // `client_request_id` returns the first sweep.
  // `owner` (the submitting user token's name; empty without authentication)
  // is stored with the sweep and becomes the owner of every point's job.
  absl::StatusOr<tessera::v1::SubmitSweepResponse> Submit(
      const tessera::v1::SweepSpec& spec, const std::string& spec_yaml,
      const std::string& client_request_id, const std::string& owner = "");

  // These act for `caller` (see caller.h): another user's sweep is NotFound
  // unless the caller is an admin.
  absl::StatusOr<tessera::v1::Sweep> Get(const Caller& caller, int64_t sweep_id);
  absl::StatusOr<std::vector<tessera::v1::Sweep>> List(const Caller& caller);
  absl::StatusOr<tessera::v1::SweepReport> Report(const Caller& caller, int64_t sweep_id);
  // Cancels the active points and submits no more; FailedPrecondition once the
  // sweep has ended.
  absl::StatusOr<tessera::v1::SweepState> Cancel(const Caller& caller, int64_t sweep_id);

  // Advances every running sweep: submits points up to max_parallel, and
  // records sweeps whose points have all ended.
  void Tick();

 private:
  // Submits due points of a running sweep and ends it when every point has.
  absl::Status AdvanceLocked(SweepRecord& sweep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sweep's jobs indexed by point (missing points: not submitted yet).
  absl::StatusOr<std::vector<const tessera::v1::Job*>> PointJobs(
      const SweepRecord& sweep, size_t points, std::vector<tessera::v1::Job>& storage);
  tessera::v1::Sweep ToProto(const SweepRecord& sweep);
  // The stored sweep, if the caller may see it; NotFound otherwise.
  absl::StatusOr<SweepRecord> Visible(const Caller& caller, int64_t sweep_id);
  // The sweep with its points' jobs.
  absl::StatusOr<tessera::v1::Sweep> Expand(const SweepRecord& sweep);

  Store* const store_;        // Not owned.
  JobRequests* const jobs_;   // Not owned.
  const Clock* const clock_;  // Not owned.
  const SpecLimits limits_;

  absl::Mutex mu_;
  std::set<int64_t> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SWEEP_MANAGER_H_
