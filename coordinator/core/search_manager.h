// SearchManager: runs hyperparameter searches (docs/search.md). A search is
// stored in the searches table before Submit answers; its trials train as
// ordinary jobs, owned by the search's owner, submitted through JobRequests
// (quota, fair share and Slurm pools apply as to any job).
//
// Which job comes next is Asha's decision (asha.h; grid and random are
// searches of one rung), made from the search's rows in the store: one
// SearchJobRecord per (trial, rung). A decision is written down before its
// job is submitted, and the job's request id is derived from (search, trial,
// rung), so a coordinator that dies in between submits that same job again
// after a restart and JobRequests answers with the first one: no job is lost
// or submitted twice. Once a trial's job has ended, its row records the
// outcome: the rung's metric (the job's last reported value of the search's
// metric) or, for a job that failed, was cancelled or reported no metric,
// "failed"; a failed trial is never promoted, and the search goes on.
//
// Tick(), run by the coordinator's monitor thread, brings every running
// search up to date and starts jobs while fewer than max_concurrent run. A
// search ends SUCCEEDED once nothing runs and nothing is left to start, with
// at least one trial's metric; FAILED without one; CANCELLED by Cancel, which
// cancels its running jobs. Everything lives in the store, so Recover() after
// a restart just carries on.
//
// Thread-safety: safe from any thread. One mutex serialises what advances
// searches (including the store calls it makes, as SweepManager's does); it
// is taken before the JobManager's, never the other way round.
#ifndef TESSERA_COORDINATOR_CORE_SEARCH_MANAGER_H_
#define TESSERA_COORDINATOR_CORE_SEARCH_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/search_spec.h"
#include "coordinator/core/caller.h"
#include "coordinator/core/job_requests.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

class SearchManager {
 public:
  struct Options {
    SpecLimits limits;  // for every trial's job, as for submitted jobs
    // The most slots the cluster can offer (ClusterView::SlotCapacity): a
    // search whose max_concurrent trials cannot all run at once is refused.
    // Empty: no check.
    std::function<int64_t()> cluster_slots;
  };

  // `store`, `jobs` and `clock` are not owned and must outlive the manager.
  SearchManager(Store* store, JobRequests* jobs, const Clock* clock, Options options);

  SearchManager(const SearchManager&) = delete;
  SearchManager& operator=(const SearchManager&) = delete;

  // Finds the searches still running in the store and submits the jobs they
  // had decided on but not submitted. Call once, after the JobManager's
  // Recover and before serving.
  absl::Status Recover();

  // Validates and stores the search, then starts its first trials. A repeated
  // `client_request_id` returns the first search. `owner` (the submitting
  // user token's name; empty without authentication) owns every trial's job.
  // InvalidArgument naming the key for a bad spec, and for a max_concurrent
  // whose trials do not fit the cluster's slots.
  absl::StatusOr<tessera::v1::SubmitSearchResponse> Submit(
      const tessera::v1::SearchSpec& spec, const std::string& spec_yaml,
      const std::string& client_request_id, const std::string& owner = "");

  // These act for `caller` (caller.h): another user's search is NotFound
  // unless the caller is an admin.
  absl::StatusOr<tessera::v1::Search> Get(const Caller& caller, int64_t search_id);
  absl::StatusOr<std::vector<tessera::v1::Search>> List(const Caller& caller);
  // Stops the search (stored first, so nothing more starts even across a
  // crash) and cancels its running jobs; FailedPrecondition once it has ended.
  absl::StatusOr<tessera::v1::SearchState> Cancel(const Caller& caller,
                                                  int64_t search_id);

  // Advances every running search.
  void Tick();

  // The trials of the running searches by status (SearchTrial.status:
  // "running", "paused", "completed", "failed"; each present), for /metrics.
  // A search the store cannot read is left out.
  std::map<std::string, int64_t> RunningTrialsByStatus();

 private:
  // Brings the search's rows up to date (submits decided jobs, records ended
  // jobs' outcomes), starts jobs up to max_concurrent, and ends the search
  // when nothing is left.
  absl::Status AdvanceLocked(SearchRecord& search) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The search's rows, each one not ended brought up to date.
  absl::StatusOr<std::vector<SearchJobRecord>> RefreshLocked(const SearchRecord& search)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submits the job of a decided row and records its id; a job that can never
  // be submitted (its spec refused) is recorded failed. Other errors are
  // returned and the row stays decided, to be submitted on a later tick.
  absl::Status SubmitLocked(const SearchRecord& search, SearchJobRecord& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the outcome of the row's job if it has ended.
  absl::Status UpdateOutcomeLocked(const SearchRecord& search, SearchJobRecord& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the search's end: SUCCEEDED with its best trial, or FAILED.
  absl::Status FinishLocked(SearchRecord& search,
                            const std::vector<SearchJobRecord>& rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InvalidArgument when max_concurrent trials of the smallest world size do
  // not fit the cluster's slots.
  absl::Status CheckSlots(const tessera::v1::SearchSpec& spec,
                          const std::vector<SearchTrialJob>& trials) const;
  // The job's last value of `name` (last step, then last attempt, then
  // lowest rank); nullopt when it reported none.
  absl::StatusOr<std::optional<tessera::v1::MetricPoint>> LastMetric(
      int64_t job_id, const std::string& name);
  // The stored search, if the caller may see it; NotFound otherwise.
  absl::StatusOr<SearchRecord> Visible(const Caller& caller, int64_t search_id);
  // The search with its trials.
  absl::StatusOr<tessera::v1::Search> Expand(const SearchRecord& search);

  Store* const store_;        // Not owned.
  JobRequests* const jobs_;   // Not owned.
  const Clock* const clock_;  // Not owned.
  const Options options_;

  absl::Mutex mu_;
  std::set<int64_t> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SEARCH_MANAGER_H_
