#include "coordinator/core/sweep_manager.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "common/sweep_spec.h"
#include "coordinator/core/sweep_report.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

std::string PointRequestId(int64_t sweep_id, int32_t point) {
  return absl::StrCat("sweep:", sweep_id, ":point:", point);
}

// A sweep's own errors keep the store's codes, except that a store that cannot
// take writes is reported as retryable.
absl::Status Retryable(const absl::Status& s, absl::string_view what) {
  if (absl::IsResourceExhausted(s) || absl::IsInternal(s) || absl::IsDataLoss(s)) {
    return absl::UnavailableError(absl::StrCat(what, ", try again: ", s.message()));
  }
  return s;
}

}  // namespace

SweepManager::SweepManager(Store* store, JobRequests* jobs, const Clock* clock,
                           SpecLimits limits)
    : store_(store), jobs_(jobs), clock_(clock), limits_(limits) {}

absl::Status SweepManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<SweepRecord> sweeps, store_->ListSweeps());
  absl::MutexLock lock(&mu_);
  for (const SweepRecord& s : sweeps) {
    if (s.state == v1::SWEEP_STATE_RUNNING) running_.insert(s.id);
  }
  if (!running_.empty()) spdlog::info("{} sweeps still running", running_.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::SubmitSweepResponse> SweepManager::Submit(
    const v1::SweepSpec& spec, const std::string& spec_yaml,
    const std::string& client_request_id, const std::string& owner) {
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(spec, limits_));
  if (client_request_id.size() > 128) {
    return absl::InvalidArgumentError("client_request_id: longer than 128 characters");
  }
  if (spec_yaml.size() > 64 * 1024) {
    return absl::InvalidArgumentError("spec_yaml: larger than 64 KiB");
  }
  SweepRecord record;
  record.name = spec.name();
  record.state = v1::SWEEP_STATE_RUNNING;
  record.reason = "submitted";
  record.spec = spec;
  record.spec_yaml = spec_yaml;
  record.client_request_id = client_request_id;
  record.owner = owner;
  record.created_unix_ms = absl::ToUnixMillis(clock_->Now());
  record.updated_unix_ms = record.created_unix_ms;
  absl::StatusOr<int64_t> created = store_->CreateSweep(record);
  if (!created.ok()) return Retryable(created.status(), "sweep not stored");
  record.id = *created;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(SweepRecord stored, store_->GetSweep(record.id));
    if (stored.state == v1::SWEEP_STATE_RUNNING) {
      if (running_.insert(stored.id).second) {
        spdlog::info("sweep {} ({}) submitted: {} points, {} at a time", stored.id,
                     stored.name, points.size(), std::max(1, spec.max_parallel()));
      }
      absl::Status advanced = AdvanceLocked(stored);
      // The sweep is stored; the monitor retries the points it could not submit.
      if (!advanced.ok()) spdlog::warn("sweep {}: {}", stored.id, advanced.ToString());
    }
  }
  jobs_->changes().Notify();
  v1::SubmitSweepResponse response;
  response.set_sweep_id(record.id);
  response.set_points(static_cast<int32_t>(points.size()));
  return response;
}

absl::StatusOr<std::vector<const v1::Job*>> SweepManager::PointJobs(
    const SweepRecord& sweep, size_t points, std::vector<v1::Job>& storage) {
  JobFilter filter;
  filter.sweep_id = sweep.id;
  filter.limit = std::numeric_limits<int32_t>::max();
  ASSIGN_OR_RETURN(JobList list, jobs_->ListJobs(Caller::Admin(), filter));
  storage = std::move(list.jobs);
  std::vector<const v1::Job*> by_point(points, nullptr);
  for (const v1::Job& job : storage) {
    const int32_t p = job.sweep_point();
    // Jobs are listed newest first; the first seen for a point is the one kept.
    if (p >= 0 && static_cast<size_t>(p) < points && by_point[p] == nullptr) {
      by_point[p] = &job;
    }
  }
  return by_point;
}

absl::Status SweepManager::AdvanceLocked(SweepRecord& sweep) {
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(sweep.spec, limits_));
  std::vector<v1::Job> storage;
  ASSIGN_OR_RETURN(std::vector<const v1::Job*> jobs,
                   PointJobs(sweep, points.size(), storage));
  const int max_parallel = std::max(1, sweep.spec.max_parallel());
  int active = 0;
  for (const v1::Job* job : jobs) {
    if (job != nullptr && !IsTerminal(job->state())) ++active;
  }
  for (size_t i = 0; i < points.size() && active < max_parallel; ++i) {
    if (jobs[i] != nullptr) continue;
    JobOrigin origin;
    origin.sweep_id = sweep.id;
    origin.sweep_point = static_cast<int32_t>(i);
    origin.owner = sweep.owner;
    ASSIGN_OR_RETURN(const int64_t job_id,
                     jobs_->Submit(points[i].job, /*spec_yaml=*/"",
                                   PointRequestId(sweep.id, origin.sweep_point), origin));
    spdlog::info("sweep {} point {} submitted as job {}", sweep.id, i, job_id);
    ++active;
    // Re-read so that the point counts as submitted below.
    storage.clear();
    ASSIGN_OR_RETURN(jobs, PointJobs(sweep, points.size(), storage));
  }
  int ended = 0;
  int succeeded = 0;
  for (const v1::Job* job : jobs) {
    if (job == nullptr || !IsTerminal(job->state())) continue;
    ++ended;
    if (job->state() == v1::JOB_STATE_SUCCEEDED) ++succeeded;
  }
  if (ended < static_cast<int>(points.size())) return absl::OkStatus();
  const int total = static_cast<int>(points.size());
  sweep.state = succeeded == total ? v1::SWEEP_STATE_SUCCEEDED : v1::SWEEP_STATE_FAILED;
  sweep.reason = succeeded == total ? absl::StrCat("all ", total, " points succeeded")
                                    : absl::StrCat(total - succeeded, " of ", total,
                                                   " points did not succeed");
  sweep.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  RETURN_IF_ERROR(store_->UpdateSweep(sweep));
  running_.erase(sweep.id);
  spdlog::info("sweep {} ended: {}", sweep.id, sweep.reason);
  jobs_->changes().Notify();
  return absl::OkStatus();
}

void SweepManager::Tick() {
  absl::MutexLock lock(&mu_);
  const std::set<int64_t> running = running_;
  for (int64_t id : running) {
    absl::StatusOr<SweepRecord> sweep = store_->GetSweep(id);
    absl::Status status = sweep.status();
    if (sweep.ok()) {
      if (sweep->state != v1::SWEEP_STATE_RUNNING) {
        running_.erase(id);
        continue;
      }
      status = AdvanceLocked(*sweep);
    }
    if (!status.ok()) {
      // Retried on the next tick; a store that is full recovers by itself.
      spdlog::warn("sweep {}: cannot advance: {}", id, status.ToString());
    }
  }
}

absl::StatusOr<SweepRecord> SweepManager::Visible(const Caller& caller,
                                                  int64_t sweep_id) {
  absl::StatusOr<SweepRecord> sweep = store_->GetSweep(sweep_id);
  if ((sweep.ok() && !caller.MaySee(sweep->owner)) || absl::IsNotFound(sweep.status())) {
    return absl::NotFoundError(absl::StrCat("sweep ", sweep_id, " not found"));
  }
  return sweep;
}

absl::StatusOr<v1::SweepState> SweepManager::Cancel(const Caller& caller,
                                                    int64_t sweep_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(SweepRecord sweep, Visible(caller, sweep_id));
  if (sweep.state != v1::SWEEP_STATE_RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sweep ", sweep_id, " has already ended: ", v1::SweepState_Name(sweep.state)));
  }
  sweep.state = v1::SWEEP_STATE_CANCELLED;
  sweep.reason = "cancelled by user";
  sweep.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  // Stored first, so that a crash in between never submits more points.
  absl::Status updated = store_->UpdateSweep(sweep);
  if (!updated.ok()) return Retryable(updated, "sweep not cancelled");
  running_.erase(sweep_id);
  JobFilter filter;
  filter.sweep_id = sweep_id;
  filter.limit = std::numeric_limits<int32_t>::max();
  ASSIGN_OR_RETURN(JobList jobs, jobs_->ListJobs(Caller::Admin(), filter));
  for (const v1::Job& job : jobs.jobs) {
    if (IsTerminal(job.state())) continue;
    absl::StatusOr<v1::JobState> cancelled = jobs_->CancelJob(caller, job.id());
    // A point that ended meanwhile is fine.
    if (!cancelled.ok() && !absl::IsFailedPrecondition(cancelled.status())) {
      spdlog::warn("sweep {}: cancelling job {}: {}", sweep_id, job.id(),
                   cancelled.status().ToString());
    }
  }
  spdlog::info("sweep {} cancelled", sweep_id);
  jobs_->changes().Notify();
  return sweep.state;
}

v1::Sweep SweepManager::ToProto(const SweepRecord& sweep) {
  v1::Sweep out;
  out.set_id(sweep.id);
  out.set_name(sweep.name);
  out.set_state(sweep.state);
  out.set_reason(sweep.reason);
  *out.mutable_spec() = sweep.spec;
  out.set_spec_yaml(sweep.spec_yaml);
  out.set_created_unix_ms(sweep.created_unix_ms);
  out.set_updated_unix_ms(sweep.updated_unix_ms);
  return out;
}

absl::StatusOr<v1::Sweep> SweepManager::Get(const Caller& caller, int64_t sweep_id) {
  ASSIGN_OR_RETURN(SweepRecord sweep, Visible(caller, sweep_id));
  return Expand(sweep);
}

absl::StatusOr<v1::Sweep> SweepManager::Expand(const SweepRecord& sweep) {
  v1::Sweep out = ToProto(sweep);
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(sweep.spec, limits_));
  std::vector<v1::Job> storage;
  ASSIGN_OR_RETURN(std::vector<const v1::Job*> jobs,
                   PointJobs(sweep, points.size(), storage));
  for (size_t i = 0; i < points.size(); ++i) {
    v1::SweepPoint* p = out.add_points();
    *p = points[i].point;
    if (jobs[i] != nullptr) {
      p->set_job_id(jobs[i]->id());
      p->set_state(jobs[i]->state());
    }
  }
  return out;
}

absl::StatusOr<std::vector<v1::Sweep>> SweepManager::List(const Caller& caller) {
  ASSIGN_OR_RETURN(std::vector<SweepRecord> sweeps, store_->ListSweeps());
  std::vector<v1::Sweep> out;
  out.reserve(sweeps.size());
  for (const SweepRecord& s : sweeps) {
    if (!caller.MaySee(s.owner)) continue;
    absl::StatusOr<v1::Sweep> full = Expand(s);
    out.push_back(full.ok() ? *std::move(full) : ToProto(s));
  }
  return out;
}

absl::StatusOr<v1::SweepReport> SweepManager::Report(const Caller& caller,
                                                     int64_t sweep_id) {
  ASSIGN_OR_RETURN(v1::Sweep sweep, Get(caller, sweep_id));
  return BuildSweepReport(sweep, *jobs_);
}

}  // namespace tessera
