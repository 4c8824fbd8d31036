#include "coordinator/core/job_manager.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/core/worker_orders.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

constexpr RankState kAssigned = RankState::kAssigned;
constexpr RankState kRunning = RankState::kRunning;
constexpr RankState kExited = RankState::kExited;
// An eval job's result: per-class figures and at most 100 x 100 confusion
// counts (worker/trainer/run/eval_report.h) fit easily; it is kept in the ranks row.
constexpr size_t kMaxEvalResultBytes = 4 << 20;

// What the coordinator believes about a reported rank: `rank` is the current
// rank it names on the reporting worker, or nullptr when there is none.
RankBelief BeliefOf(const RankRecord* rank) {
  if (rank == nullptr) return RankBelief{};
  return RankBelief{.current = true, .state = rank->state, .pid = rank->pid};
}

WorkerRegistryOptions RegistryOptions(const JobManagerOptions& options) {
  return WorkerRegistryOptions{.heartbeat_interval = options.heartbeat_interval,
                               .suspect_after = options.worker_suspect_after,
                               .dead_after = options.worker_dead_after};
}

// Whether rank `rank` of attempt `attempt` of the active `job` is placed on
// `worker`: in the current attempt, among earlier ranks being stopped, or lost.
bool PlacedOn(const ActiveJob& job, int32_t attempt, int32_t rank,
              const std::string& worker) {
  const auto is = [&](const RankRecord& r) {
    return r.attempt == attempt && r.rank == rank && r.worker == worker;
  };
  return std::any_of(job.ranks.begin(), job.ranks.end(), is) ||
         std::any_of(job.previous.begin(), job.previous.end(), is) ||
         std::any_of(job.lost.begin(), job.lost.end(),
                     [&](const LostRank& lost) { return is(lost.rank); });
}

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

void RunReleases(RendezvousRounds::Releases& releases) {
  for (auto& [callback, result] : releases) callback(std::move(result));
  releases.clear();
}

JobManager::JobManager(Store* store, StoreWriter* writer, const Clock* clock,
                       JobManagerOptions options)
    : store_(store),
      writer_(writer),
      clock_(clock),
      options_(std::move(options)),
      outputs_(store, writer, &changes_, options_.max_points_per_report,
               RankOutputs::Limits{options_.job_limits.max_metric_rows,
                                   options_.job_limits.max_log_bytes,
                                   options_.job_limits.max_metric_names}),
      workers_(writer, clock, RegistryOptions(options_)),
      usage_(options_.usage_half_life) {}

int64_t JobManager::NowMs() const { return absl::ToUnixMillis(clock_->Now()); }

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, store_->ListWorkers());
  ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->ListActiveJobs());
  ASSIGN_OR_RETURN(std::vector<UsageRecord> usage, store_->ListUsage());
  absl::MutexLock lock(&mu_);
  for (const UsageRecord& u : usage) {
    usage_.Restore(u.user, u.slot_seconds, absl::FromUnixMillis(u.updated_unix_ms));
  }
  last_accrual_ = clock_->Now();
  workers_.Recover(std::move(workers));
  for (auto& rec : active) RETURN_IF_ERROR(RecoverJobLocked(std::move(rec)));
  spdlog::info("recovered {} workers and {} active jobs from the store", workers_.size(),
               jobs_.size());
  ScheduleLocked();
  return absl::OkStatus();
}

absl::Status JobManager::RecoverJobLocked(JobRecord record) {
  ActiveJob job;
  job.record = std::move(record);
  if (job.record.attempt > 0) {
    ASSIGN_OR_RETURN(job.ranks, store_->GetRanks(job.record.id, job.record.attempt));
  }
  // Trainers may have renewed their leases up to the moment the previous
  // coordinator stopped: count their leases from now.
  for (const RankRecord& r : job.ranks) {
    job.last_contact[{r.attempt, r.rank}] = clock_->Now();
  }
  if (job.record.state == v1::JOB_STATE_QUEUED) {
    // A job between attempts: ranks of the failed attempt that no worker
    // confirmed stopped (still running when the coordinator stopped, or lost
    // with a dead worker, exit code -1) may still run.
    for (const RankRecord& r : job.ranks) {
      if (r.state != kExited || (r.exit_code == -1 && r.signal == 0)) {
        LoseRankLocked(job, r);
      }
    }
    job.ranks.clear();
  }
  job.kill_sent.assign(job.ranks.size(), false);
  if (!job.ranks.empty()) job.adopted_attempt = job.record.attempt;
  job.shed_named = job.record.metrics_not_stored + job.record.log_lines_not_stored;
  job.queued_at = absl::FromUnixMillis(job.record.updated_unix_ms);
  ASSIGN_OR_RETURN(job.events, store_->ListEvents(job.record.id));
  if (job.record.state == v1::JOB_STATE_SCHEDULED) {
    rendezvous_.Open(job.record.id, job.record.attempt, job.LocalRanks());
    job.placed_at = clock_->Now();
  }
  if (job.record.state == v1::JOB_STATE_RUNNING) {
    // Silence counts from the adoption: the ranks report again within seconds.
    std::vector<std::string> where;
    for (const RankRecord& r : job.ranks) where.push_back(r.worker);
    job.watch.emplace(std::move(where), clock_->Now());
  }
  int64_t id = job.record.id;
  jobs_.emplace(id, std::move(job));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Submit(const v1::JobSpec& spec,
                                           const std::string& spec_yaml,
                                           const std::string& client_request_id,
                                           const JobOrigin& origin) {
  RETURN_IF_ERROR(ValidateJobSpec(spec, options_.spec_limits));
  if (client_request_id.size() > 128) {
    return absl::InvalidArgumentError("client_request_id: longer than 128 characters");
  }
  if (spec_yaml.size() > 64 * 1024) {
    return absl::InvalidArgumentError("spec_yaml: larger than 64 KiB");
  }
  RETURN_IF_ERROR(CheckUserLimits(spec, origin));
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
  record.created_unix_ms = NowMs();
  record.updated_unix_ms = record.created_unix_ms;
  // Durable before acknowledged: the store commits before we answer.
  absl::StatusOr<int64_t> created = store_->CreateJob(record);
  if (absl::IsResourceExhausted(created.status()) || absl::IsInternal(created.status()) ||
      absl::IsDataLoss(created.status())) {
    // The store cannot take writes (full disk, I/O error): the client retries.
    return absl::UnavailableError(
        absl::StrCat("job not stored, try again: ", created.status().message()));
  }
  ASSIGN_OR_RETURN(int64_t id, std::move(created));
  record.id = id;

  absl::MutexLock lock(&mu_);
  if (!jobs_.contains(id)) {
    ASSIGN_OR_RETURN(JobRecord stored, store_->GetJob(id));
    if (stored.state == v1::JOB_STATE_QUEUED && stored.attempt == 0 &&
        stored.created_unix_ms == record.created_unix_ms) {
      ActiveJob job;
      job.record = std::move(stored);
      job.queued_at = clock_->Now();
      job.owner_admin = origin.admin;
      job.events.push_back(JobEvent{id, job.record.created_unix_ms,
                                    v1::JOB_STATE_UNSPECIFIED, v1::JOB_STATE_QUEUED,
                                    job.record.reason});
      jobs_.emplace(id, std::move(job));
      spdlog::info("job {} ({}) queued: world size {}", id, spec.name(),
                   spec.world_size());
      ScheduleLocked();
    }
  }
  changes_.Notify();
  return id;
}

absl::StatusOr<v1::Job> JobManager::GetJob(const Caller& caller, int64_t job_id) {
  {
    // Active jobs are answered from memory: no disk I/O on the status path.
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      if (!caller.MaySee(it->second.record.owner)) return NotFound(job_id);
      v1::Job job = it->second.ToProto(clock_->Now());
      job.set_not_stored(!writer_->healthy() && writer_->UnstoredJobs().contains(job_id));
      if (SlurmPoolManager* slurm = slurm_.load(); slurm != nullptr) {
        if (std::optional<SlurmAllocation> a = slurm->Allocation(job_id)) {
          job.set_slurm_allocation(
              absl::StrCat(a->slurm_job_id, " in pool ", a->pool, " (",
                           a->state.empty() ? "ended" : a->state, ")"));
        }
      }
      return job;
    }
    // Ended, but not yet stored: the store would show an older state.
    auto unstored = unstored_.find(job_id);
    if (unstored != unstored_.end() && writer_->UnstoredJobs().contains(job_id)) {
      if (!caller.MaySee(unstored->second.owner())) return NotFound(job_id);
      v1::Job job = unstored->second;
      job.set_not_stored(!writer_->healthy());
      return job;
    }
  }
  writer_->Flush();
  absl::StatusOr<JobRecord> record = store_->GetJob(job_id);
  if (absl::IsNotFound(record.status())) return NotFound(job_id);
  RETURN_IF_ERROR(record.status());
  if (!caller.MaySee(record->owner)) return NotFound(job_id);
  std::vector<RankRecord> ranks;
  if (record->attempt > 0) {
    ASSIGN_OR_RETURN(ranks, store_->GetRanks(job_id, record->attempt));
  }
  v1::Job job = JobToProto(*record, ranks);
  ASSIGN_OR_RETURN(std::vector<JobEvent> events, store_->ListEvents(job_id));
  AddEvents(events, job);
  return job;
}

absl::StatusOr<JobList> JobManager::ListJobs(const Caller& caller, JobFilter filter) {
  if (filter.limit < 0) return absl::InvalidArgumentError("limit: must not be negative");
  if (filter.limit == 0) filter.limit = options_.default_list_limit;
  if (!caller.admin) {
    filter.limit = std::min(filter.limit, options_.max_list_limit);
    if (!filter.owner.empty() && filter.owner != caller.name) return JobList();
    filter.owner = caller.name;
  }
  // While the store fails, a flush would wait for nothing: the jobs whose
  // writes are kept are shown from memory below.
  if (writer_->healthy()) writer_->Flush();
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, store_->ListJobs(filter));
  JobList list;
  std::vector<v1::Job>& out = list.jobs;
  out.reserve(records.size());
  absl::MutexLock lock(&mu_);
  for (const auto& rec : records) {
    auto it = jobs_.find(rec.id);
    if (it != jobs_.end()) {
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

std::vector<v1::Worker> JobManager::ListWorkers(const Caller& caller) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Worker> workers = workers_.List(UsedSlotsLocked());
  // Slots held by jobs the caller may not see: a count, no job or owner.
  std::map<std::string, std::vector<int32_t>> others;
  for (const auto& [id, job] : jobs_) {
    if (!caller.MaySee(job.record.owner)) job.AddUsedSlots(others);
  }
  for (v1::Worker& w : workers) {
    auto it = others.find(w.name());
    w.set_slots_used_by_others(
        it == others.end() ? 0 : static_cast<int32_t>(it->second.size()));
  }
  return workers;
}

absl::StatusOr<std::string> JobManager::OwnerOf(int64_t job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) return it->second.record.owner;
  }
  writer_->Flush();
  absl::StatusOr<JobRecord> record = store_->GetJob(job_id);
  if (absl::IsNotFound(record.status())) return NotFound(job_id);
  RETURN_IF_ERROR(record.status());
  return record->owner;
}

absl::Status JobManager::CheckVisible(const Caller& caller, int64_t job_id) {
  ASSIGN_OR_RETURN(std::string owner, OwnerOf(job_id));
  if (!caller.MaySee(owner)) return NotFound(job_id);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::MetricPoint>> JobManager::GetMetrics(
    const Caller& caller, const v1::GetMetricsRequest& request) {
  RETURN_IF_ERROR(CheckVisible(caller, request.job_id()));
  bool active = false;
  {
    absl::MutexLock lock(&mu_);
    active = jobs_.contains(request.job_id());
  }
  return outputs_.GetMetrics(request, active);
}

absl::Status JobManager::CheckUserLimits(const v1::JobSpec& spec,
                                         const JobOrigin& origin) {
  if (origin.admin) return absl::OkStatus();
  const UserLimits& limits = options_.user_limits;
  if (spec.priority() > limits.max_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", spec.priority(), " is above ", limits.max_priority,
                     ", the highest a non-admin may set (--max-user-priority)"));
  }
  if (limits.max_running_ranks > 0 && spec.world_size() > limits.max_running_ranks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "world_size: ", spec.world_size(), " ranks exceed the per-user limit of ",
        limits.max_running_ranks, " running ranks (--max-running-ranks)"));
  }
  absl::MutexLock lock(&mu_);
  const UserLoad load = LoadByUserLocked()[origin.owner];
  if (limits.max_queued_jobs > 0 && load.queued_jobs >= limits.max_queued_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user ", origin.owner, " has ", load.queued_jobs, " queued jobs, the limit (",
        limits.max_queued_jobs, ", --max-queued-jobs); wait for some to start"));
  }
  return absl::OkStatus();
}

std::map<std::string, UserLoad> JobManager::LoadByUserLocked() const {
  std::map<std::string, UserLoad> load;
  for (const auto& [id, job] : jobs_) {
    UserLoad& l = load[job.record.owner];
    if (job.record.state == v1::JOB_STATE_QUEUED) {
      ++l.queued_jobs;
    } else {
      std::map<std::string, std::vector<int32_t>> used;
      job.AddUsedSlots(used);
      for (const auto& [worker, slots] : used) l.placed_ranks += slots.size();
    }
  }
  return load;
}

void JobManager::AccrueUsageLocked() {
  const absl::Time now = clock_->Now();
  if (now <= last_accrual_) return;
  const double seconds = absl::ToDoubleSeconds(now - last_accrual_);
  for (const auto& [user, load] : LoadByUserLocked()) {
    if (load.placed_ranks > 0) usage_.Charge(user, seconds * load.placed_ranks, now);
  }
  last_accrual_ = now;
}

std::vector<UserShare> JobManager::GetShare(const Caller& caller) {
  absl::MutexLock lock(&mu_);
  AccrueUsageLocked();
  const absl::Time now = clock_->Now();
  std::map<std::string, UserLoad> load = LoadByUserLocked();
  std::set<std::string> users;
  for (const auto& [user, l] : load) users.insert(user);
  std::map<std::string, double> factors = usage_.Factors(now, users);
  std::vector<UserShare> out;
  for (const auto& [user, factor] : factors) {
    if (!caller.MaySee(user)) continue;
    out.push_back(UserShare{.user = user,
                            .usage_slot_seconds = usage_.Usage(user, now),
                            .factor = factor,
                            .running_ranks = load[user].placed_ranks,
                            .queued_jobs = load[user].queued_jobs});
  }
  if (out.empty() && !caller.admin) out.push_back(UserShare{.user = caller.name});
  return out;
}

absl::StatusOr<v1::RegisterWorkerResponse> JobManager::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  v1::RegisterWorkerResponse response;
  RendezvousRounds::Releases releases;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(response, workers_.Register(request));
    if (SlurmPoolManager* slurm = slurm_.load();
        slurm != nullptr && !request.slurm_job_id().empty()) {
      slurm->WorkerJoined(request.slurm_job_id());  // takes only its own lock
    }
    // The new session runs only what it lists: reconcile as for a heartbeat,
    // and count every other rank placed there as lost at once (a worker that
    // restarted within the dead threshold would otherwise leave ghosts).
    v1::HeartbeatRequest listed;
    listed.set_name(request.name());
    listed.set_epoch(response.epoch());
    *listed.mutable_ranks() = request.ranks();
    const HeartbeatReport report(listed, /*registration=*/true);
    v1::HeartbeatResponse later;  // orders and acknowledgements go with heartbeats
    bool changed = ReconcileReportedRanksLocked(report, later, &releases);
    changed |= ReconcileUnlistedRanksLocked(report);
    changed |= LoseUnlistedRanksLocked(report, &releases);
    if (changed) ReapLocked();
    ScheduleLocked();
  }
  changes_.Notify();
  RunReleases(releases);
  return response;
}

absl::StatusOr<v1::Worker> JobManager::DrainWorker(const Caller& caller,
                                                   const std::string& name,
                                                   absl::Duration timeout, bool undrain) {
  if (!caller.admin) {
    return absl::PermissionDeniedError(
        "draining a worker takes an admin token (tessctl token create NAME --admin)");
  }
  v1::Worker out;
  {
    absl::MutexLock lock(&mu_);
    if (undrain) {
      RETURN_IF_ERROR(workers_.Undrain(name));
      ScheduleLocked();
    } else {
      const absl::Duration wait =
          timeout > absl::ZeroDuration() ? timeout : options_.drain_timeout;
      RETURN_IF_ERROR(workers_.Drain(
          name, absl::StrCat("drain by ", caller.name.empty() ? "an admin" : caller.name),
          clock_->Now() + wait));
    }
    for (v1::Worker& w : workers_.List(UsedSlotsLocked())) {
      if (w.name() == name) out = std::move(w);
    }
  }
  changes_.Notify();
  return out;
}

bool JobManager::WorkerLive(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return workers_.Live(name);
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(
    const v1::HeartbeatRequest& request) {
  ScopedLatency latency(heartbeat_latency_);
  v1::HeartbeatResponse response;
  RendezvousRounds::Releases releases;
  std::vector<RankRecord> exits;  // recorded by this heartbeat
  {
    absl::MutexLock lock(&mu_);
    // An exit in this report can end a placement, and a reaped job is no
    // longer charged: its time up to now is charged first, at the load it had.
    if (std::any_of(request.ranks().begin(), request.ranks().end(),
                    [](const v1::LocalRank& r) { return r.exited(); })) {
      AccrueUsageLocked();
    }
    ASSIGN_OR_RETURN(const HeartbeatReport report, workers_.Heartbeat(request));
    if (request.draining() && !workers_.Draining(request.name())) {
      // SIGTERM or a preemption notice: the worker asks its ranks to leave.
      RETURN_IF_ERROR(workers_.Drain(request.name(), "worker stopping",
                                     clock_->Now() + options_.drain_timeout,
                                     /*self=*/true));
    }
    bool changed = ReconcileReportedRanksLocked(report, response, &releases, &exits);
    changed |= ReconcileUnlistedRanksLocked(report);
    changed |= LoseUnlistedRanksLocked(report, &releases);
    AddOrdersLocked(report, response);
    if (changed) {
      ReapLocked();
      ScheduleLocked();
    }
  }
  // The worker's last heartbeat time (and maybe its ranks) changed.
  changes_.Notify();
  RunReleases(releases);
  // An exit is acknowledged (and then forgotten by the worker) only once it
  // is durable: a coordinator that crashes before the write hears it again.
  // The records are written once more with a completion: the writer applies
  // writes in order and keeps failed state writes for retry, so its success
  // means these rows are committed.
  if (!exits.empty()) {
    auto stored = std::make_shared<absl::Notification>();
    auto ok = std::make_shared<std::atomic<bool>>(false);
    writer_->PutRanks(exits, [stored, ok](absl::Status status) {
      ok->store(status.ok());
      stored->Notify();
    });
    // Bounded well inside the dead threshold: while the store fails, this
    // worker's next heartbeat waits for this one, and a worker must never look
    // dead for waiting on the store (its exits are acknowledged later).
    const absl::Duration wait =
        std::min(options_.exit_ack_timeout, options_.worker_dead_after / 4);
    if (!stored->WaitForNotificationWithTimeout(wait) || !ok->load()) {
      spdlog::warn(
          "the exits worker {} reported are not stored yet; acknowledging them later",
          request.name());
      response.clear_acknowledged_exits();
    }
  }
  return response;
}

bool JobManager::LoseUnlistedRanksLocked(const HeartbeatReport& report,
                                         RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (auto& [id, job] : jobs_) {
    bool lost = false;
    for (RankRecord& r : job.ranks) {
      if (r.worker != report.worker() || report.Lists(id, r.attempt, r.rank) ||
          report.ReconcileUnlisted(BeliefOf(&r)) != RankVerdict::kLost) {
        continue;
      }
      r.state = kExited;
      r.exit_code = -1;
      r.signal = 0;
      r.exit_reason =
          report.registration()
              ? absl::StrCat("lost: worker ", r.worker,
                             " registered again (restarted) without it")
              : absl::StrCat("lost: worker ", r.worker, " no longer reports it");
      spdlog::warn("job {} attempt {} rank {} {}", id, r.attempt, r.rank, r.exit_reason);
      writer_->PutRanks({r});
      lost = true;
    }
    if (lost) {
      EvaluateLocked(job, releases);
      changed = true;
    }
  }
  return changed;
}

bool JobManager::ReconcileReportedRanksLocked(const HeartbeatReport& report,
                                              v1::HeartbeatResponse& response,
                                              RendezvousRounds::Releases* releases,
                                              std::vector<RankRecord>* recorded) {
  bool changed = false;
  // One rank at a time: an exit may end the attempt, which makes the ranks
  // reported after it no longer current.
  for (const v1::LocalRank& lr : report.ranks()) {
    auto it = jobs_.find(lr.job_id());
    ActiveJob* job = it == jobs_.end() ? nullptr : &it->second;
    RankRecord* rank = job == nullptr
                           ? nullptr
                           : job->CurrentRank(lr.attempt(), lr.rank(), report.worker());
    switch (report.Reconcile(lr, BeliefOf(rank))) {
      case RankVerdict::kNone:
        break;
      case RankVerdict::kRecordRunning:
        rank->state = kRunning;
        rank->pid = lr.pid();
        writer_->PutRanks({*rank});
        break;
      case RankVerdict::kRecordExit:
        RecordExitLocked(*job, lr, releases, recorded);
        changed = true;
        *response.add_acknowledged_exits() = KillOrderFor(lr);
        break;
      case RankVerdict::kAcknowledgeExit:
        *response.add_acknowledged_exits() = KillOrderFor(lr);
        break;
      case RankVerdict::kForget:
        if (job != nullptr) {
          changed |= job->ForgetExitedRank(lr.attempt(), lr.rank(), report.worker());
        }
        *response.add_acknowledged_exits() = KillOrderFor(lr);
        break;
      case RankVerdict::kLost:  // only for ranks a worker does not list
        break;
      case RankVerdict::kStop:
        if (rank == nullptr) {
          spdlog::warn(
              "worker {} runs job {} attempt {} rank {}, which is not current; "
              "stopping it",
              report.worker(), lr.job_id(), lr.attempt(), lr.rank());
        }
        *response.add_kill() = KillOrderFor(lr);
        break;
    }
  }
  return changed;
}

void JobManager::RecordExitLocked(ActiveJob& job, const v1::LocalRank& reported,
                                  RendezvousRounds::Releases* releases,
                                  std::vector<RankRecord>* recorded) {
  const RankRecord& rank = job.RecordExit(reported);
  writer_->PutRanks({rank});
  if (recorded != nullptr) recorded->push_back(rank);
  spdlog::info("job {} attempt {} rank {} {}", job.record.id, job.record.attempt,
               rank.rank, rank.exit_reason);
  // May end the attempt, which clears job.ranks: `rank` is not used after this.
  EvaluateLocked(job, releases);
}

bool JobManager::ReconcileUnlistedRanksLocked(const HeartbeatReport& report) {
  bool changed = false;
  for (auto& [job_id, job] : jobs_) {
    const int64_t id = job_id;  // lambdas cannot capture a structured binding (clang 14)
    // Ranks of earlier attempts (being stopped, or lost) are not current.
    auto stopped = [&](const RankRecord& r) {
      return r.worker == report.worker() && !report.Lists(id, r.attempt, r.rank) &&
             report.ReconcileUnlisted(RankBelief{}) == RankVerdict::kForget;
    };
    const size_t before = job.previous.size() + job.lost.size();
    std::erase_if(job.previous, stopped);
    std::erase_if(job.lost, [&](const LostRank& l) {
      if (!stopped(l.rank)) return false;
      spdlog::info("job {}: lost rank {} of attempt {} does not run on {}", id,
                   l.rank.rank, l.rank.attempt, report.worker());
      return true;
    });
    changed |= job.previous.size() + job.lost.size() != before;
  }
  return changed;
}

void JobManager::AddOrdersLocked(const HeartbeatReport& report,
                                 v1::HeartbeatResponse& response) {
  const bool draining = workers_.Draining(report.worker());
  for (auto& [id, job] : jobs_) {
    const std::vector<int32_t> local_ranks = job.LocalRanks();
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      const RankRecord& rank = job.ranks[r];
      if (rank.worker != report.worker()) continue;
      if (job.kill_sent[r] && rank.state != kExited) {
        *response.add_kill() = KillOrderFor(id, job.record.attempt, rank.rank);
      } else if (draining && rank.state == kRunning && !IsTerminal(job.record.state)) {
        // Sent with every heartbeat until the rank leaves; the worker signals
        // each rank once.
        if (job.preempting.empty()) {
          job.preempting = absl::StrCat("preempted on ", report.worker(), " (",
                                        workers_.DrainReason(report.worker()), ")");
          spdlog::info("job {} attempt {}: {}; its ranks checkpoint and leave", id,
                       job.record.attempt, job.preempting);
        }
        *response.add_preempt() = KillOrderFor(id, job.record.attempt, rank.rank);
      } else if (rank.state == kAssigned && !IsTerminal(job.record.state) && !draining &&
                 !report.ListsRank(id, rank.rank)) {
        // The trainer's lease may count from any launch order sent.
        job.last_contact[{job.record.attempt, rank.rank}] = clock_->Now();
        *response.add_launch() = LaunchOrderFor(job.record, job.ranks, r, local_ranks[r]);
      }
    }
  }
}

void JobManager::EvaluateLocked(ActiveJob& job, RendezvousRounds::Releases* releases) {
  if (IsTerminal(job.record.state) || job.ranks.empty()) return;
  if (const RankRecord* failed = job.FirstFailedRank(); failed != nullptr) {
    // A rank stopped while its job was being preempted fails for the drain.
    const bool preempted = !job.preempting.empty();
    FailAttemptLocked(
        job,
        absl::StrCat(preempted ? job.preempting + "; " : "", "rank ", failed->rank,
                     " on ", failed->worker, " ", failed->exit_reason),
        releases, preempted);
    return;
  }
  if (const RankRecord* lost = job.ResultLostRank(); lost != nullptr) {
    // Never a SUCCEEDED without the result, nor a FAILED for a result the
    // previous coordinator took: the attempt resumes from its checkpoint,
    // not counted as a restart.
    FailAttemptLocked(job,
                      absl::StrCat("rank ", lost->rank, " on ", lost->worker,
                                   " exited with code 0, but its result was lost with "
                                   "the previous coordinator before it was stored; "
                                   "resuming from the checkpoint"),
                      releases, /*preempted=*/true);
    return;
  }
  if (job.AllExitedCleanly()) {
    rendezvous_.Close(job.record.id, job.record.attempt, absl::OkStatus());
    Transition(job, v1::JOB_STATE_SUCCEEDED,
               absl::StrCat("all ", job.ranks.size(), " ranks exited with code 0"));
    return;
  }
  // Preempted ranks leave together (they agree on the step); until the last
  // one has, the others may still be writing the checkpoint.
  if (job.AllExitedPreempted()) {
    const std::string cause = job.preempting.empty()
                                  ? std::string("preempted (SIGUSR1 to its ranks)")
                                  : job.preempting;
    const int64_t step = job.watch.has_value() ? job.watch->MaxStep() : 0;
    FailAttemptLocked(
        job,
        absl::StrCat(cause, ": the ranks checkpointed",
                     step > 0 ? absl::StrCat(" at step ", step) : "", " and left"),
        releases, /*preempted=*/true);
  }
}

void JobManager::FailAttemptLocked(ActiveJob& job, const std::string& reason,
                                   RendezvousRounds::Releases* releases, bool preempted) {
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    if (job.ranks[r].state != kExited) job.kill_sent[r] = true;
  }
  auto closed =
      rendezvous_.Close(job.record.id, job.record.attempt, absl::AbortedError(reason));
  for (auto& c : closed) releases->push_back(std::move(c));
  const int32_t restarts_used = job.record.attempt - 1 - job.record.preemptions;
  if (preempted || restarts_used < job.record.spec.max_restarts()) {
    // The survivors keep their slots until they are gone; the next attempt is
    // placed once the slots are free.
    for (auto& r : job.ranks) {
      if (r.state != kExited) job.previous.push_back(r);
    }
    job.ranks.clear();
    job.kill_sent.clear();
    const std::string hold =
        job.lost.empty() ? "" : absl::StrCat("; ", job.HoldReason(clock_->Now()));
    if (preempted) {
      job.record.preemptions += 1;
      Transition(job, v1::JOB_STATE_QUEUED,
                 absl::StrCat("attempt ", job.record.attempt, " ", reason,
                              "; requeued (preemption ", job.record.preemptions,
                              ", not counted as a restart)", hold));
      return;
    }
    Transition(job, v1::JOB_STATE_QUEUED,
               absl::StrCat("attempt ", job.record.attempt, " failed: ", reason,
                            "; restarting (restart ", restarts_used + 1, " of ",
                            job.record.spec.max_restarts(), ")", hold));
    return;
  }
  Transition(job, v1::JOB_STATE_FAILED, reason);
}

void JobManager::LoseWorkerRanksLocked(const std::string& worker, const std::string& why,
                                       RendezvousRounds::Releases* releases) {
  for (auto& [id, job] : jobs_) {
    // Whether the worker's ranks stopped is unknown from here on: behind a
    // partition they may run on until their leases run out.
    for (const RankRecord& r : job.previous) {
      if (r.worker == worker) LoseRankLocked(job, r);
    }
    std::erase_if(job.previous, [&](const RankRecord& r) { return r.worker == worker; });
    bool lost = false;
    for (auto& r : job.ranks) {
      if (r.worker != worker || r.state == kExited) continue;
      LoseRankLocked(job, r);
      r.state = kExited;
      r.exit_code = -1;
      r.signal = 0;
      r.exit_reason = why;
      writer_->PutRanks({r});
      lost = true;
    }
    if (lost) EvaluateLocked(job, releases);
  }
}

void JobManager::Tick() {
  RendezvousRounds::Releases releases;
  std::vector<UsageRecord> usage;
  writer_->BelowReserve();  // refreshes the store's mode; statvfs, before the lock
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [id, job] : jobs_) NoteShedLocked(job);
    if (!unstored_.empty()) {
      const std::set<int64_t> kept = writer_->UnstoredJobs();
      std::erase_if(unstored_,
                    [&](const auto& entry) { return !kept.contains(entry.first); });
    }
    AccrueUsageLocked();
    if (now - last_usage_save_ >= options_.usage_save_interval) {
      last_usage_save_ = now;
      for (const FairShare::Entry& e : usage_.Entries()) {
        usage.push_back(UsageRecord{e.user, e.slot_seconds, absl::ToUnixMillis(e.at)});
      }
    }
    bool changed = DeclareSilentWorkersDeadLocked(&releases);
    changed |= ExpireLostRanksLocked(now);
    changed |= FailTimedOutRendezvousLocked(now, &releases);
    changed |= WatchRunningLocked(now, &releases);
    changed |= EnforceDrainsLocked(now, &releases);
    if (changed) {
      ReapLocked();
      ScheduleLocked();
    }
  }
  RunReleases(releases);
  // Usage is only for ordering: a save lost to a crash costs little.
  if (!usage.empty()) {
    if (absl::Status saved = store_->PutUsage(usage); !saved.ok()) {
      spdlog::warn("cannot save fair-share usage: {}", saved.ToString());
    }
  }
}

bool JobManager::DeclareSilentWorkersDeadLocked(RendezvousRounds::Releases* releases) {
  const std::vector<std::string> silent = workers_.Silent();
  for (const std::string& name : silent) {
    // The worker's session is fenced: when it comes back it must register
    // again, and then stops every rank that is no longer current.
    const std::string why = workers_.DeclareDead(name);
    LoseWorkerRanksLocked(name, why, releases);
  }
  return !silent.empty();
}

bool JobManager::WatchRunningLocked(absl::Time now,
                                    RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (auto& [id, job] : jobs_) {
    if (job.record.state != v1::JOB_STATE_RUNNING || !job.watch.has_value()) continue;
    const RankWatchOptions options =
        RankWatchFor(options_.watchdog, job.record.spec.watchdog());
    std::vector<bool> running;
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      // A rank whose result is in (stored or kept for the store) has finished.
      running.push_back(job.ranks[r].state != kExited && !job.kill_sent[r] &&
                        !job.ranks[r].has_result);
    }
    if (std::optional<WatchVerdict> verdict = job.watch->Check(now, options, running)) {
      spdlog::warn("job {} attempt {}: watchdog: {}", id, job.record.attempt,
                   verdict->reason);
      FailAttemptLocked(job, absl::StrCat("watchdog: ", verdict->reason), releases);
      changed = true;
      continue;
    }
    for (const std::string& text : job.watch->UpdateStragglers(now, options, running)) {
      spdlog::warn("job {} attempt {}: straggler: {}", id, job.record.attempt, text);
      RecordEventLocked(job, absl::StrCat("straggler: ", text));
    }
  }
  return changed;
}

bool JobManager::EnforceDrainsLocked(absl::Time now,
                                     RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (const std::string& name : workers_.DrainingWorkers()) {
    const absl::Time deadline = workers_.DrainDeadline(name);
    for (auto& [id, job] : jobs_) {
      if (IsTerminal(job.record.state)) continue;
      bool here = false;
      bool unstarted = false;
      for (const RankRecord& r : job.ranks) {
        if (r.worker != name || r.state == kExited) continue;
        here = true;
        unstarted |= r.state == kAssigned;
      }
      if (!here || (now < deadline && !unstarted)) continue;
      const std::string cause =
          job.preempting.empty()
              ? absl::StrCat("preempted on ", name, " (", workers_.DrainReason(name), ")")
              : job.preempting;
      FailAttemptLocked(
          job,
          absl::StrCat(cause, unstarted ? ": moved before its ranks there started"
                                        : ": its ranks did not leave within the "
                                          "drain timeout and were stopped"),
          releases, /*preempted=*/true);
      changed = true;
    }
  }
  return changed;
}

void JobManager::RecordEventLocked(ActiveJob& job, const std::string& text) {
  const int64_t now = NowMs();
  job.events.push_back(
      JobEvent{job.record.id, now, job.record.state, job.record.state, text});
  job.record.updated_unix_ms = now;
  JobRecord update = job.record;
  update.event = text;
  writer_->UpdateJob(std::move(update));
  changes_.Notify();
}

bool JobManager::ExpireLostRanksLocked(absl::Time now) {
  bool changed = false;
  for (auto& [id, job] : jobs_) changed |= job.ExpireLostRanks(now);
  return changed;
}

bool JobManager::FailTimedOutRendezvousLocked(absl::Time now,
                                              RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (auto& [id, job] : jobs_) {
    if (job.record.state != v1::JOB_STATE_SCHEDULED ||
        now - job.placed_at <= options_.rendezvous_timeout) {
      continue;
    }
    std::optional<std::vector<int32_t>> missing =
        rendezvous_.Missing(id, job.record.attempt);
    std::string who;
    for (int32_t r : missing.value_or(std::vector<int32_t>{})) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", r, " (on ", job.ranks[r].worker,
                      ")");
    }
    FailAttemptLocked(
        job,
        absl::StrCat("rendezvous timed out after ",
                     absl::FormatDuration(options_.rendezvous_timeout), ": rank(s) ",
                     who.empty() ? "?" : who, " never joined"),
        releases);
    changed = true;
  }
  return changed;
}

void JobManager::ReapLocked() {
  std::optional<std::set<int64_t>> unstored;  // asked for once, when needed
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->second.Finished()) {
      ++it;
      continue;
    }
    if (!unstored) unstored = writer_->UnstoredJobs();
    if (unstored->contains(it->first)) {
      unstored_[it->first] = it->second.ToProto(clock_->Now());
    }
    outputs_.Forget(it->first);
    figures_.Forget(it->first);
    it = jobs_.erase(it);
  }
}

void JobManager::LoseRankLocked(ActiveJob& job, const RankRecord& rank) {
  const absl::Time now = clock_->Now();
  auto contact = job.last_contact.find({rank.attempt, rank.rank});
  const absl::Time from = contact != job.last_contact.end() ? contact->second : now;
  // Before its first renewal a trainer counts the first contact lease, so
  // the longer of the two bounds how long it may run unrenewed.
  const absl::Duration lease =
      std::max(options_.trainer_lease, options_.trainer_first_contact_lease);
  job.LoseRank(rank, now,
               from + lease * (1 + options_.trainer_lease_margin_ratio) +
                   options_.trainer_lease_margin);
}

absl::StatusOr<absl::Duration> JobManager::RenewLease(
    const v1::RenewLeaseRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", request.job_id(), " is not active"));
  }
  ActiveJob& job = it->second;
  if (job.record.attempt != request.attempt() || request.rank() < 0 ||
      request.rank() >= static_cast<int32_t>(job.ranks.size())) {
    return absl::AbortedError(absl::StrCat("attempt ", request.attempt(), " rank ",
                                           request.rank(), " of job ", request.job_id(),
                                           " is no longer current"));
  }
  const RankRecord& rank = job.ranks[request.rank()];
  if (rank.state == kExited) {
    // Counted as gone (e.g. its worker was declared dead): it must not go on.
    return absl::AbortedError(absl::StrCat("rank ", rank.rank, " of job ", job.record.id,
                                           " counts as exited: ", rank.exit_reason));
  }
  job.last_contact[{request.attempt(), request.rank()}] = clock_->Now();
  if (job.watch.has_value() && request.has_progress()) {
    // Reports are shown to users and kept per rank: a malformed one (more
    // phases than exist, overlong names) is dropped; the renewal still counts.
    const v1::RankProgress& p = request.progress();
    bool bounded = p.phase().size() <= 32 && p.collective().size() <= 128 &&
                   p.phase_ms_size() <= 16 && p.device_phase_ms_size() <= 16;
    for (const auto& [phase, ms] : p.phase_ms()) bounded &= phase.size() <= 32;
    for (const auto& [phase, ms] : p.device_phase_ms()) bounded &= phase.size() <= 32;
    if (bounded) {
      job.watch->Report(request.rank(), p, clock_->Now());
    } else {
      spdlog::warn("job {} rank {}: malformed progress report dropped", job.record.id,
                   request.rank());
    }
  }
  return options_.trainer_lease;
}

void JobManager::Transition(ActiveJob& job, v1::JobState to, std::string reason) {
  if (absl::Status legal = CheckTransition(job.record.state, to); !legal.ok()) {
    ++illegal_transitions_;
    spdlog::error("job {}: {} ({}): a bug in the coordinator", job.record.id,
                  std::string(legal.message()), reason);
    if (IsTerminal(job.record.state) || to == job.record.state) return;
    // A state nobody designed for is not run on: the job ends, saying why.
    to = v1::JOB_STATE_FAILED;
    reason = absl::StrCat("internal error: ", legal.message(), " (", reason, ")");
  }
  spdlog::info("job {} {} -> {}: {}", job.record.id, JobStateName(job.record.state),
               JobStateName(to), reason);
  const int64_t now = NowMs();
  if (to != job.record.state) {
    job.events.push_back(JobEvent{job.record.id, now, job.record.state, to, reason});
    if (IsTerminal(to)) ++jobs_ended_[to];
  }
  job.record.state = to;
  job.record.reason = std::move(reason);
  if (to == v1::JOB_STATE_QUEUED) job.queued_at = clock_->Now();
  if (to != v1::JOB_STATE_QUEUED) job.record.pending_reason.clear();
  job.record.updated_unix_ms = now;
  writer_->UpdateJob(job.record);
  if (IsTerminal(to)) NoteShedLocked(job);
  changes_.Notify();
}

void JobManager::NoteShedLocked(ActiveJob& job) {
  const StoreWriter::Shed shed = writer_->TakeShed(job.record.id);
  job.record.metrics_not_stored += shed.metric_rows;
  job.record.log_lines_not_stored += shed.log_lines;
  const int64_t total = job.record.metrics_not_stored + job.record.log_lines_not_stored;
  if (total == job.shed_named || !IsTerminal(job.record.state)) return;
  job.shed_named = total;
  std::vector<std::string> parts;
  if (job.record.metrics_not_stored > 0) {
    parts.push_back(
        absl::StrCat("metrics not stored: ", job.record.metrics_not_stored, " rows"));
  }
  if (job.record.log_lines_not_stored > 0) {
    parts.push_back(
        absl::StrCat("logs not stored: ", job.record.log_lines_not_stored, " lines"));
  }
  parts.push_back("the database's disk is full");
  RecordEventLocked(job, absl::StrJoin(parts, ", "));
}

void JobManager::MarkUnstoredLocked(std::vector<v1::Job>& list) const {
  const bool healthy = writer_->healthy();
  if (healthy && unstored_.empty()) return;
  const std::set<int64_t> unstored = writer_->UnstoredJobs();
  for (v1::Job& job : list) {
    if (!unstored.contains(job.id())) continue;
    auto snapshot = unstored_.find(job.id());
    if (snapshot != unstored_.end()) job = snapshot->second;
    job.set_not_stored(!healthy);
  }
}

JobManager::StoreMode JobManager::GetStoreMode() const {
  if (!writer_->healthy()) return StoreMode::kNotServing;
  return writer_->shedding() ? StoreMode::kDegraded : StoreMode::kServing;
}

void JobManager::ScheduleLocked() {
  std::vector<PendingJob> queue = QueueLocked();
  if (queue.empty()) return;
  ScopedLatency latency(scheduling_latency_);
  AccrueUsageLocked();
  std::set<std::string> owners;
  for (const PendingJob& job : queue) owners.insert(job.owner);
  if (options_.fair_share) {
    const std::map<std::string, double> factors = usage_.Factors(clock_->Now(), owners);
    for (PendingJob& job : queue) job.fair_share = factors.at(job.owner);
  }
  SchedulerOptions options{.reserve_after = options_.reserve_after,
                           .max_ranks_per_owner = options_.user_limits.max_running_ranks,
                           .max_slot_share = options_.user_limits.max_slot_share};
  for (const auto& [user, load] : LoadByUserLocked()) {
    options.placed_by_owner[user] = load.placed_ranks;
  }
  std::vector<WorkerInventory> inventory = workers_.Inventory(UsedSlotsLocked());
  SlurmPoolManager* const slurm = slurm_.load();
  const std::map<std::string, int64_t> reserved_workers =
      slurm == nullptr ? std::map<std::string, int64_t>() : slurm->ReservedWorkers();
  if (!reserved_workers.empty()) {
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
      if (has_own) one = Schedule({job}, own, clock_->Now(), options);
      if (one.placements.empty()) {
        rest.push_back(job);
        continue;
      }
      PlaceLocked(one.placements[0]);
      inventory = workers_.Inventory(UsedSlotsLocked());
    }
    queue = std::move(rest);
    for (WorkerInventory& w : inventory) {
      if (reserved_workers.contains(w.worker)) w.alive = false;
    }
  }
  ScheduleResult result = Schedule(queue, inventory, clock_->Now(), options);
  for (const Placement& placement : result.placements) PlaceLocked(placement);
  lacking_workers_ = result.lacking_workers;
  for (const auto& [id, reason] : result.pending_reasons) {
    std::optional<std::string> in_slurm;
    if (slurm != nullptr && lacking_workers_.contains(id))
      in_slurm = slurm->PendingReason(id);
    SetPendingReasonLocked(jobs_.at(id), in_slurm.value_or(reason));
  }
}

void JobManager::TickSlurm() {
  SlurmPoolManager* const slurm = slurm_.load();
  if (slurm == nullptr || !slurm->TickIfDue(*this)) return;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, job] : jobs_) {
      if (job.record.state != v1::JOB_STATE_QUEUED) continue;
      if (std::optional<std::string> why = slurm->PendingReason(id)) {
        SetPendingReasonLocked(job, *why);
      }
    }
    ScheduleLocked();
  }
  changes_.Notify();
}

SlurmPoolSnapshot JobManager::SlurmSnapshot() {
  SlurmPoolSnapshot snapshot;
  absl::MutexLock lock(&mu_);
  for (const v1::Worker& w : workers_.List(UsedSlotsLocked())) {
    if (w.pool().empty() || !workers_.Live(w.name())) continue;
    snapshot.workers.push_back(SlurmPoolWorker{.name = w.name(),
                                               .pool = w.pool(),
                                               .slurm_job_id = w.slurm_job_id(),
                                               .running_ranks = w.slots_used(),
                                               .draining = w.draining()});
  }
  for (const auto& [id, job] : jobs_) {
    if (job.record.state != v1::JOB_STATE_QUEUED || !lacking_workers_.contains(id)) {
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

std::vector<PendingJob> JobManager::QueueLocked() {
  std::vector<PendingJob> queue;
  for (auto& [id, job] : jobs_) {
    if (job.record.state != v1::JOB_STATE_QUEUED) continue;
    // No next attempt while a rank of an earlier one may still run: the
    // same (job, rank) would run twice.
    const std::string hold = job.HoldReason(clock_->Now());
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

std::map<std::string, std::vector<int32_t>> JobManager::UsedSlotsLocked() const {
  std::map<std::string, std::vector<int32_t>> used;
  for (const auto& [id, job] : jobs_) job.AddUsedSlots(used);
  return used;
}

void JobManager::PlaceLocked(const Placement& placement) {
  ActiveJob& job = jobs_.at(placement.job_id);
  job.StartAttempt(placement, clock_->Now());
  std::vector<int32_t> local_ranks;
  for (const RankPlacement& rp : placement.ranks) local_ranks.push_back(rp.local_rank);
  rendezvous_.Open(placement.job_id, job.record.attempt, std::move(local_ranks));
  writer_->PutRanks(job.ranks);
  Transition(
      job, v1::JOB_STATE_SCHEDULED,
      absl::StrCat("attempt ", job.record.attempt, " placed: ", job.PlacementText()));
}

void JobManager::SetPendingReasonLocked(ActiveJob& job, const std::string& reason) {
  if (job.record.pending_reason == reason) return;
  job.record.pending_reason = reason;
  job.record.updated_unix_ms = NowMs();
  writer_->UpdateJob(job.record);
}

void JobManager::Rendezvous(
    const v1::RendezvousRequest& request,
    std::function<void(absl::StatusOr<v1::RendezvousResponse>)> done) {
  if (request.bootstrap().size() > 4096) {
    done(absl::InvalidArgumentError("bootstrap: larger than 4096 bytes"));
    return;
  }
  RendezvousRounds::Releases releases;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) {
      status =
          absl::NotFoundError(absl::StrCat("job ", request.job_id(), " is not active"));
    } else if (it->second.record.attempt != request.attempt()) {
      status = absl::AbortedError(absl::StrCat("attempt ", request.attempt(),
                                               " is stale; current is ",
                                               it->second.record.attempt));
    } else {
      auto callback = [done](absl::StatusOr<RendezvousResult> result) {
        if (!result.ok()) {
          done(result.status());
          return;
        }
        v1::RendezvousResponse response;
        response.set_rank(result->rank);
        response.set_local_rank(result->local_rank);
        response.set_world_size(result->world_size);
        response.set_attempt(result->attempt);
        response.set_bootstrap(result->bootstrap);
        response.set_backend(result->backend);
        done(std::move(response));
      };
      bool completed = false;
      status = rendezvous_.Join(request.job_id(), request.attempt(), request.rank(),
                                request.bootstrap(), request.backend(), callback,
                                &releases, &completed);
      if (status.ok() && completed) {
        std::vector<std::string> where;
        for (const RankRecord& r : it->second.ranks) where.push_back(r.worker);
        it->second.watch.emplace(std::move(where), clock_->Now());
        rendezvous_latency_.Observe(clock_->Now() - it->second.placed_at);
        Transition(it->second, v1::JOB_STATE_RUNNING,
                   absl::StrCat("all ", it->second.ranks.size(), " ranks joined"));
      }
    }
  }
  RunReleases(releases);
  if (!status.ok()) done(status);
}

void JobManager::ReportMetrics(const v1::ReportMetricsRequest& request,
                               std::function<void(absl::Status)> done) {
  absl::StatusOr<std::vector<MetricRow>> rows = outputs_.MetricRows(request);
  if (!rows.ok()) {
    RefuseMetrics(request.points_size(), rows.status(), done);
    return;
  }
  if (absl::Status charged = outputs_.ChargeMetrics(request.job_id(), *rows);
      !charged.ok()) {
    RefuseMetrics(rows->size(), charged, done);
    return;
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    RefuseMetrics(
        rows->size(),
        absl::NotFoundError(absl::StrCat("job ", request.job_id(), " is not active")),
        done);
    return;
  }
  if (it->second.record.attempt != request.attempt()) {
    // A credential of an earlier attempt is still valid; its data is not.
    RefuseMetrics(
        rows->size(),
        absl::AbortedError(absl::StrCat("attempt ", request.attempt(), " is stale")),
        done);
    return;
  }
  if (request.rank() < 0 ||
      request.rank() >= static_cast<int32_t>(it->second.ranks.size())) {
    RefuseMetrics(rows->size(),
                  absl::InvalidArgumentError(
                      absl::StrCat("rank ", request.rank(), " is outside the job")),
                  done);
    return;
  }
  figures_.Record(*rows);
  // Enqueued under the lock so the rows are ordered with the job's state changes.
  const int64_t count = static_cast<int64_t>(rows->size());
  outputs_.AppendMetrics(
      *std::move(rows), [this, count, done = std::move(done)](absl::Status stored) {
        (stored.ok() ? metric_rows_written_ : metric_rows_refused_).fetch_add(count);
        done(std::move(stored));
      });
}

void JobManager::RefuseMetrics(size_t rows, const absl::Status& status,
                               const std::function<void(absl::Status)>& done) {
  metric_rows_refused_.fetch_add(static_cast<int64_t>(rows));
  done(status);
}

absl::Status JobManager::ReportResult(const v1::ReportResultRequest& request) {
  if (request.param_hash().size() > 128) {
    return absl::InvalidArgumentError("param_hash: longer than 128 characters");
  }
  if (request.eval().ByteSizeLong() > kMaxEvalResultBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval: ", request.eval().ByteSizeLong(), " bytes, limit ", kMaxEvalResultBytes));
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", request.job_id(), " is not active"));
  }
  ActiveJob& job = it->second;
  if (job.record.attempt != request.attempt()) {
    return absl::AbortedError(absl::StrCat("attempt ", request.attempt(), " is stale"));
  }
  if (request.rank() < 0 || request.rank() >= static_cast<int32_t>(job.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank(), " is outside the job"));
  }
  RankRecord& rank = job.ranks[request.rank()];
  rank.has_result = true;
  rank.param_hash = request.param_hash();
  rank.test_accuracy = request.test_accuracy();
  rank.test_loss = request.test_loss();
  if (request.has_eval()) rank.eval_result = request.eval().SerializeAsString();
  writer_->PutRanks({rank});
  changes_.Notify();
  return absl::OkStatus();
}

absl::StatusOr<v1::JobState> JobManager::CancelJob(const Caller& caller, int64_t job_id) {
  RETURN_IF_ERROR(CheckVisible(caller, job_id));
  RendezvousRounds::Releases releases;
  std::optional<v1::JobState> ended;  // set when the job had already ended
  {
    absl::MutexLock lock(&mu_);
    AccrueUsageLocked();  // before ranks that never launched stop counting
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && IsTerminal(it->second.record.state)) {
      ended = it->second.record.state;
    } else if (it != jobs_.end()) {
      ActiveJob& job = it->second;
      for (size_t r = 0; r < job.ranks.size(); ++r) {
        RankRecord& rank = job.ranks[r];
        if (rank.state == kAssigned) {
          // Not launched yet, and now never will be.
          rank.state = kExited;
          rank.exit_reason = "cancelled before launch";
          writer_->PutRanks({rank});
        } else if (rank.state != kExited) {
          job.kill_sent[r] = true;
        }
      }
      releases = rendezvous_.Close(job_id, job.record.attempt,
                                   absl::CancelledError("job cancelled"));
      Transition(job, v1::JOB_STATE_CANCELLED,
                 caller.name.empty() || caller.name == job.record.owner
                     ? std::string("cancelled by user")
                     : absl::StrCat("cancelled by ", caller.name, " (admin)"));
      ReapLocked();
      ScheduleLocked();
    }
  }
  if (!releases.empty()) RunReleases(releases);
  if (!ended) {
    writer_->Flush();
    absl::StatusOr<JobRecord> record = store_->GetJob(job_id);
    if (absl::IsNotFound(record.status())) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    }
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

absl::StatusOr<v1::ShipLogsResponse> JobManager::ShipLogs(
    const v1::ShipLogsRequest& request) {
  RETURN_IF_ERROR(RankOutputs::CheckChunk(request));
  bool placed_here = false;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(workers_.CheckSession(request.name(), request.epoch()));
    auto it = jobs_.find(request.job_id());
    placed_here = it != jobs_.end() &&
                  PlacedOn(it->second, request.attempt(), request.rank(), request.name());
  }
  if (!placed_here) {
    // An ended job, or an earlier attempt already forgotten: the store has
    // every attempt's placement (its last writes may still be queued).
    writer_->Flush();
    absl::StatusOr<std::vector<RankRecord>> ranks =
        store_->GetRanks(request.job_id(), request.attempt());
    if (!ranks.ok() && !absl::IsNotFound(ranks.status())) return ranks.status();
    placed_here =
        ranks.ok() && std::any_of(ranks->begin(), ranks->end(), [&](const RankRecord& r) {
          return r.rank == request.rank() && r.worker == request.name();
        });
  }
  if (!placed_here) {
    return absl::PermissionDeniedError(
        absl::StrCat("rank ", request.rank(), " of job ", request.job_id(), " attempt ",
                     request.attempt(), " was not assigned to worker ", request.name()));
  }
  return outputs_.ShipLog(request);
}

absl::StatusOr<v1::GetLogsResponse> JobManager::GetLogs(
    const Caller& caller, const v1::GetLogsRequest& request) {
  RETURN_IF_ERROR(CheckVisible(caller, request.job_id()));
  std::optional<ActiveLog> active;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end()) active = it->second.LogOf(request.attempt(), request.rank());
  }
  return outputs_.ReadLog(request, active);
}

void JobManager::Shutdown() {
  RendezvousRounds::Releases releases;
  {
    absl::MutexLock lock(&mu_);
    releases =
        rendezvous_.CloseAll(absl::UnavailableError("coordinator is shutting down"));
  }
  RunReleases(releases);
}

}  // namespace tessera
