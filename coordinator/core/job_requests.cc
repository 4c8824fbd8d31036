#include "coordinator/core/job_requests.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// What the caller of a list may see of a job: no spec text and no env values.
void ForList(v1::Job& job) {
  job.clear_spec_yaml();
  for (auto& [name, value] : *job.mutable_spec()->mutable_env()) value = "<redacted>";
}

absl::Status NotFound(int64_t job_id) {
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

// Request ids are unique per owner: the stored key is scoped by the owner.
std::string ScopedRequestId(const std::string& owner, const std::string& id) {
  if (id.empty()) return id;
  return absl::StrCat(owner.size(), ":", owner, ":", id);
}

}  // namespace

absl::StatusOr<int64_t> JobRequests::Submit(const v1::JobSpec& spec,
                                            const std::string& spec_yaml,
                                            const std::string& client_request_id,
                                            const JobOrigin& origin) {
  RETURN_IF_ERROR(ValidateJobSpec(spec, state_.options.spec_limits));
  if (client_request_id.size() > 128) {
    return absl::InvalidArgumentError("client_request_id: longer than 128 characters");
  }
  if (spec_yaml.size() > 64 * 1024) {
    return absl::InvalidArgumentError("spec_yaml: larger than 64 KiB");
  }
  RETURN_IF_ERROR(quotas_.CheckSubmit(spec, origin.owner, origin.admin));
  JobRecord record;
  record.name = spec.name();
  record.state = v1::JOB_STATE_QUEUED;
  record.reason = "submitted";
  record.spec = spec;
  record.spec_yaml = spec_yaml;
  record.client_request_id = ScopedRequestId(origin.owner, client_request_id);
  record.sweep_id = origin.sweep_id;
  record.sweep_point = origin.sweep_point;
  record.owner = origin.owner;
  record.created_unix_ms = state_.NowMs();
  record.updated_unix_ms = record.created_unix_ms;
  // Durable before acknowledged: the store commits before we answer.
  absl::StatusOr<int64_t> created = state_.store->CreateJob(record);
  if (absl::IsResourceExhausted(created.status()) || absl::IsInternal(created.status()) ||
      absl::IsDataLoss(created.status())) {
    // The store cannot take writes (full disk, I/O error): the client retries.
    return absl::UnavailableError(
        absl::StrCat("job not stored, try again: ", created.status().message()));
  }
  ASSIGN_OR_RETURN(int64_t id, std::move(created));
  {
    absl::MutexLock lock(&state_.mu);
    if (!state_.jobs.contains(id)) {
      ASSIGN_OR_RETURN(JobRecord stored, state_.store->GetJob(id));
      // A repeated request id answers with the first job, which is not new.
      if (stored.state == v1::JOB_STATE_QUEUED && stored.attempt == 0 &&
          stored.created_unix_ms == record.created_unix_ms) {
        AddSubmittedLocked(id, stored, origin);
      }
    }
  }
  state_.changes.Notify();
  return id;
}

void JobRequests::AddSubmittedLocked(int64_t id, const JobRecord& submitted,
                                     const JobOrigin& origin) {
  ActiveJob job;
  job.record = submitted;
  job.queued_at = state_.clock->Now();
  job.owner_admin = origin.admin;
  job.events.push_back(JobEvent{id, job.record.created_unix_ms, v1::JOB_STATE_UNSPECIFIED,
                                v1::JOB_STATE_QUEUED, job.record.reason});
  spdlog::info("job {} ({}) queued: world size {}", id, job.record.spec.name(),
               job.record.spec.world_size());
  state_.jobs.emplace(id, std::move(job));
  placer_.ScheduleLocked();
}

absl::StatusOr<v1::Job> JobRequests::GetJob(const Caller& caller, int64_t job_id) {
  if (std::optional<absl::StatusOr<v1::Job>> in_memory = GetFromMemory(caller, job_id)) {
    return *std::move(in_memory);
  }
  state_.writer->Flush();
  absl::StatusOr<JobRecord> record = state_.store->GetJob(job_id);
  if (absl::IsNotFound(record.status())) return NotFound(job_id);
  RETURN_IF_ERROR(record.status());
  if (!caller.MaySee(record->owner)) return NotFound(job_id);
  std::vector<RankRecord> ranks;
  if (record->attempt > 0) {
    ASSIGN_OR_RETURN(ranks, state_.store->GetRanks(job_id, record->attempt));
  }
  v1::Job job = JobToProto(*record, ranks);
  ASSIGN_OR_RETURN(std::vector<JobEvent> events, state_.store->ListEvents(job_id));
  AddEvents(events, job);
  return job;
}

std::optional<absl::StatusOr<v1::Job>> JobRequests::GetFromMemory(const Caller& caller,
                                                                  int64_t job_id) {
  // Active jobs are answered from memory: no disk I/O on the status path.
  absl::MutexLock lock(&state_.mu);
  StoreWriter& writer = *state_.writer;
  auto it = state_.jobs.find(job_id);
  if (it != state_.jobs.end()) {
    if (!caller.MaySee(it->second.record.owner)) return NotFound(job_id);
    v1::Job job = it->second.ToProto(state_.clock->Now());
    job.set_not_stored(!writer.healthy() && writer.UnstoredJobs().contains(job_id));
    if (SlurmPoolManager* slurm = state_.slurm.load(); slurm != nullptr) {
      if (std::optional<SlurmAllocation> a = slurm->Allocation(job_id)) {
        job.set_slurm_allocation(absl::StrCat(a->slurm_job_id, " in pool ", a->pool, " (",
                                              a->state.empty() ? "ended" : a->state,
                                              ")"));
      }
    }
    return job;
  }
  // Ended, but not yet stored: the store would show an older state.
  auto unstored = state_.unstored.find(job_id);
  if (unstored != state_.unstored.end() && writer.UnstoredJobs().contains(job_id)) {
    if (!caller.MaySee(unstored->second.owner())) return NotFound(job_id);
    v1::Job job = unstored->second;
    job.set_not_stored(!writer.healthy());
    return job;
  }
  return std::nullopt;
}

absl::StatusOr<JobList> JobRequests::ListJobs(const Caller& caller, JobFilter filter) {
  const JobManagerOptions& options = state_.options;
  if (filter.limit < 0) return absl::InvalidArgumentError("limit: must not be negative");
  if (filter.limit == 0) filter.limit = options.default_list_limit;
  if (!caller.admin) {
    filter.limit = std::min(filter.limit, options.max_list_limit);
    if (!filter.owner.empty() && filter.owner != caller.name) return JobList();
    filter.owner = caller.name;
  }
  // While the store fails, a flush would wait for nothing: the jobs whose
  // writes are kept are shown from memory below.
  if (state_.writer->healthy()) state_.writer->Flush();
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, state_.store->ListJobs(filter));
  JobList list;
  std::vector<v1::Job>& out = list.jobs;
  out.reserve(records.size());
  absl::MutexLock lock(&state_.mu);
  for (const auto& rec : records) {
    auto it = state_.jobs.find(rec.id);
    if (it != state_.jobs.end()) {
      out.push_back(JobToProto(it->second.record, it->second.ranks));
    } else {
      out.push_back(JobToProto(rec, {}));
    }
  }
  MarkUnstoredLocked(out);
  for (v1::Job& job : out) ForList(job);
  if (static_cast<int>(records.size()) == filter.limit && !records.empty()) {
    list.next_before_id = records.back().id;
  }
  return list;
}

void JobRequests::MarkUnstoredLocked(std::vector<v1::Job>& list) const {
  const bool healthy = state_.writer->healthy();
  if (healthy && state_.unstored.empty()) return;
  const std::set<int64_t> unstored = state_.writer->UnstoredJobs();
  for (v1::Job& job : list) {
    if (!unstored.contains(job.id())) continue;
    auto snapshot = state_.unstored.find(job.id());
    if (snapshot != state_.unstored.end()) job = snapshot->second;
    job.set_not_stored(!healthy);
  }
}

absl::StatusOr<std::vector<v1::MetricPoint>> JobRequests::GetMetrics(
    const Caller& caller, const v1::GetMetricsRequest& request) {
  RETURN_IF_ERROR(CheckVisible(caller, request.job_id()));
  bool active = false;
  {
    absl::MutexLock lock(&state_.mu);
    active = state_.jobs.contains(request.job_id());
  }
  return state_.outputs.GetMetrics(request, active);
}

absl::StatusOr<v1::GetLogsResponse> JobRequests::GetLogs(
    const Caller& caller, const v1::GetLogsRequest& request) {
  RETURN_IF_ERROR(CheckVisible(caller, request.job_id()));
  std::optional<ActiveLog> active;
  {
    absl::MutexLock lock(&state_.mu);
    auto it = state_.jobs.find(request.job_id());
    if (it != state_.jobs.end()) {
      active = it->second.LogOf(request.attempt(), request.rank());
    }
  }
  return state_.outputs.ReadLog(request, active);
}

absl::StatusOr<std::string> JobRequests::OwnerOf(int64_t job_id) {
  {
    absl::MutexLock lock(&state_.mu);
    auto it = state_.jobs.find(job_id);
    if (it != state_.jobs.end()) return it->second.record.owner;
  }
  state_.writer->Flush();
  absl::StatusOr<JobRecord> record = state_.store->GetJob(job_id);
  if (absl::IsNotFound(record.status())) return NotFound(job_id);
  RETURN_IF_ERROR(record.status());
  return record->owner;
}

absl::Status JobRequests::CheckVisible(const Caller& caller, int64_t job_id) {
  ASSIGN_OR_RETURN(std::string owner, OwnerOf(job_id));
  if (!caller.MaySee(owner)) return NotFound(job_id);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobState> JobRequests::CancelJob(const Caller& caller,
                                                    int64_t job_id) {
  RETURN_IF_ERROR(CheckVisible(caller, job_id));
  RendezvousRounds::Releases releases;
  std::optional<v1::JobState> ended;  // set when the job had already ended
  {
    absl::MutexLock lock(&state_.mu);
    ended = CancelActiveLocked(caller, job_id, releases);
  }
  if (!releases.empty()) RunReleases(releases);
  if (!ended) {
    state_.writer->Flush();
    absl::StatusOr<JobRecord> record = state_.store->GetJob(job_id);
    if (absl::IsNotFound(record.status())) return NotFound(job_id);
    RETURN_IF_ERROR(record.status());
    if (record->state == v1::JOB_STATE_CANCELLED || !IsTerminal(record->state)) {
      return record->state;
    }
    ended = record->state;
  }
  if (*ended == v1::JOB_STATE_CANCELLED) return *ended;  // cancelling twice is fine
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job_id, " already ended: ", JobStateName(*ended)));
}

std::optional<v1::JobState> JobRequests::CancelActiveLocked(
    const Caller& caller, int64_t job_id, RendezvousRounds::Releases& releases) {
  quotas_.AccrueUsageLocked();  // before ranks that never launched stop counting
  auto it = state_.jobs.find(job_id);
  if (it == state_.jobs.end()) return std::nullopt;
  ActiveJob& job = it->second;
  if (IsTerminal(job.record.state)) return job.record.state;
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    RankRecord& rank = job.ranks[r];
    if (rank.state == RankState::kAssigned) {
      // Not launched yet, and now never will be.
      rank.state = RankState::kExited;
      rank.exit_reason = "cancelled before launch";
      state_.writer->PutRanks({rank});
    } else if (rank.state != RankState::kExited) {
      job.kill_sent[r] = true;
    }
  }
  releases = state_.rendezvous.Close(job_id, job.record.attempt,
                                     absl::CancelledError("job cancelled"));
  lifecycle_.TransitionLocked(
      job, v1::JOB_STATE_CANCELLED,
      caller.name.empty() || caller.name == job.record.owner
          ? std::string("cancelled by user")
          : absl::StrCat("cancelled by ", caller.name, " (admin)"));
  lifecycle_.ReapLocked();
  placer_.ScheduleLocked();
  return std::nullopt;
}

}  // namespace tessera
