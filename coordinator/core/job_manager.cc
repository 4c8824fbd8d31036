#include "coordinator/core/job_manager.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/core/scheduler.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

constexpr RankState kAssigned = RankState::kAssigned;
constexpr RankState kRunning = RankState::kRunning;
constexpr RankState kExited = RankState::kExited;

bool ExitedCleanly(const RankRecord& r) {
  return r.state == kExited && r.exit_code == 0 && r.signal == 0;
}

std::string ExitText(const RankRecord& r) {
  if (r.signal != 0) return absl::StrCat("was killed by signal ", r.signal);
  return absl::StrCat("exited with code ", r.exit_code);
}

// Each rank's index among the job's ranks on the same worker.
std::vector<int32_t> LocalRanks(const std::vector<RankRecord>& ranks) {
  std::map<std::string, int32_t> next;
  std::vector<int32_t> out;
  out.reserve(ranks.size());
  for (const auto& r : ranks) out.push_back(next[r.worker]++);
  return out;
}

}  // namespace

void RunReleases(Rendezvous::Releases& releases) {
  for (auto& [callback, result] : releases) callback(std::move(result));
  releases.clear();
}

JobManager::JobManager(Store* store, StoreWriter* writer, const Clock* clock,
                       JobManagerOptions options)
    : store_(store), writer_(writer), clock_(clock), options_(std::move(options)) {}

int64_t JobManager::NowMs() const { return absl::ToUnixMillis(clock_->Now()); }

bool JobManager::WorkerAlive(const WorkerRecord& w) const {
  auto it = workers_.find(w.name);
  if (it != workers_.end() && it->second.dead) return false;
  return clock_->Now() - absl::FromUnixMillis(w.last_seen_unix_ms) <=
         options_.worker_suspect_after;
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, store_->ListWorkers());
  ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->ListActiveJobs());
  absl::MutexLock lock(&mu_);
  for (auto& w : workers) {
    // Silence while the coordinator itself was down says nothing about the
    // worker: it gets a full dead-after period to heartbeat again.
    w.last_seen_unix_ms = NowMs();
    std::string name = w.name;
    workers_[name] = WorkerState{std::move(w)};
  }
  for (auto& rec : active) {
    ActiveJob job;
    job.record = std::move(rec);
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
    job.queued_at = absl::FromUnixMillis(job.record.updated_unix_ms);
    ASSIGN_OR_RETURN(job.events, store_->ListEvents(job.record.id));
    if (job.record.state == v1::JOB_STATE_SCHEDULED) {
      rendezvous_.Open(job.record.id, job.record.attempt, LocalRanks(job.ranks));
      job.placed_at = clock_->Now();
    }
    int64_t id = job.record.id;
    jobs_.emplace(id, std::move(job));
  }
  spdlog::info("recovered {} workers and {} active jobs from the store", workers_.size(),
               jobs_.size());
  ScheduleLocked();
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
  JobRecord record;
  record.name = spec.name();
  record.state = v1::JOB_STATE_QUEUED;
  record.reason = "submitted";
  record.spec = spec;
  record.spec_yaml = spec_yaml;
  record.client_request_id = client_request_id;
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

tessera::v1::Job JobManager::ToProto(const JobRecord& record,
                                     const std::vector<RankRecord>& ranks) const {
  v1::Job job;
  job.set_id(record.id);
  job.set_name(record.name);
  job.set_state(record.state);
  job.set_reason(record.reason);
  job.set_pending_reason(record.pending_reason);
  job.set_attempt(record.attempt);
  *job.mutable_spec() = record.spec;
  job.set_spec_yaml(record.spec_yaml);
  job.set_created_unix_ms(record.created_unix_ms);
  job.set_updated_unix_ms(record.updated_unix_ms);
  job.set_sweep_id(record.sweep_id);
  job.set_sweep_point(record.sweep_point);
  job.set_owner(record.owner);
  for (const auto& r : ranks) {
    v1::RankStatus* s = job.add_ranks();
    s->set_rank(r.rank);
    s->set_worker(r.worker);
    s->set_slot(r.slot);
    s->set_state(std::string(RankStateName(r.state)));
    s->set_pid(r.pid);
    s->set_exit_code(r.exit_code);
    s->set_signal(r.signal);
    s->set_has_result(r.has_result);
    s->set_param_hash(r.param_hash);
    s->set_test_accuracy(r.test_accuracy);
    s->set_exit_reason(r.exit_reason);
  }
  return job;
}

absl::StatusOr<v1::Job> JobManager::GetJob(int64_t job_id) {
  auto add_events = [](const std::vector<JobEvent>& events, v1::Job& job) {
    for (const JobEvent& e : events) {
      v1::JobEvent* p = job.add_events();
      p->set_unix_ms(e.unix_ms);
      p->set_from_state(e.from_state);
      p->set_to_state(e.to_state);
      p->set_reason(e.reason);
    }
  };
  {
    // Active jobs are answered from memory: no disk I/O on the status path.
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      v1::Job job = ToProto(it->second.record, it->second.ranks);
      add_events(it->second.events, job);
      return job;
    }
  }
  writer_->Flush();
  absl::StatusOr<JobRecord> record = store_->GetJob(job_id);
  if (absl::IsNotFound(record.status())) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  }
  RETURN_IF_ERROR(record.status());
  std::vector<RankRecord> ranks;
  if (record->attempt > 0) {
    ASSIGN_OR_RETURN(ranks, store_->GetRanks(job_id, record->attempt));
  }
  v1::Job job = ToProto(*record, ranks);
  ASSIGN_OR_RETURN(std::vector<JobEvent> events, store_->ListEvents(job_id));
  add_events(events, job);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobManager::ListJobs(const JobFilter& filter) {
  writer_->Flush();
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, store_->ListJobs(filter));
  std::vector<v1::Job> out;
  out.reserve(records.size());
  absl::MutexLock lock(&mu_);
  for (const auto& rec : records) {
    auto it = jobs_.find(rec.id);
    if (it != jobs_.end()) {
      out.push_back(ToProto(it->second.record, it->second.ranks));
    } else {
      out.push_back(ToProto(rec, {}));
    }
  }
  return out;
}

std::vector<v1::Worker> JobManager::ListWorkers() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int32_t> used;
  for (const auto& [id, job] : jobs_) {
    for (const auto& r : job.ranks) {
      if (r.state != kExited) ++used[r.worker];
    }
    for (const auto& r : job.previous) ++used[r.worker];
  }
  std::vector<v1::Worker> out;
  for (const auto& [name, w] : workers_) {
    v1::Worker p;
    p.set_name(name);
    p.set_hostname(w.record.hostname);
    p.set_slots(w.record.slots);
    p.set_slots_used(used[name]);
    p.set_alive(WorkerAlive(w.record));
    p.set_last_seen_unix_ms(w.record.last_seen_unix_ms);
    p.set_epoch(w.record.epoch);
    p.set_device_kind(w.record.device_kind);
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::vector<v1::MetricPoint>> JobManager::GetMetrics(
    const v1::GetMetricsRequest& request) {
  bool active = false;
  {
    absl::MutexLock lock(&mu_);
    active = jobs_.contains(request.job_id());
  }
  if (!active) {
    absl::Status exists = store_->GetJob(request.job_id()).status();
    if (absl::IsNotFound(exists)) {
      return absl::NotFoundError(absl::StrCat("job ", request.job_id(), " not found"));
    }
    RETURN_IF_ERROR(exists);
  }
  MetricQuery query;
  query.job_id = request.job_id();
  query.after_step = request.after_step() > 0 ? request.after_step() : -1;
  query.name = request.name();
  query.limit = request.limit() > 0 ? std::min(request.limit(), 100000) : 10000;
  ASSIGN_OR_RETURN(std::vector<MetricRow> rows, store_->QueryMetrics(query));
  std::vector<v1::MetricPoint> out;
  out.reserve(rows.size());
  for (const auto& row : rows) {
    v1::MetricPoint p;
    p.set_rank(row.rank);
    p.set_step(row.step);
    p.set_name(row.name);
    p.set_value(row.value);
    p.set_unix_ms(row.unix_ms);
    p.set_attempt(row.attempt);
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<v1::RegisterWorkerResponse> JobManager::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  if (request.name().empty() || request.name().size() > 128) {
    return absl::InvalidArgumentError("name: must be 1-128 characters");
  }
  if (request.slots() < 0 || request.slots() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots: must be between 0 and 4096, got ", request.slots()));
  }
  v1::RegisterWorkerResponse response;
  absl::MutexLock lock(&mu_);
  WorkerState& w = workers_[request.name()];
  w.record.name = request.name();
  w.record.hostname = request.hostname();
  w.record.slots = request.slots();
  w.record.device_kind = request.device_kind().empty() ? "cpu" : request.device_kind();
  w.record.epoch += 1;
  w.record.last_seen_unix_ms = NowMs();
  w.dead = false;
  writer_->UpsertWorker(w.record);
  spdlog::info("worker {} registered from {}: {} {} slots, epoch {}", w.record.name,
               w.record.hostname, w.record.slots, w.record.device_kind, w.record.epoch);
  response.set_epoch(w.record.epoch);
  response.set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  ScheduleLocked();
  changes_.Notify();
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(
    const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse response;
  Rendezvous::Releases releases;
  {
    absl::MutexLock lock(&mu_);
    auto wit = workers_.find(request.name());
    if (wit == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker ", request.name(), " is not registered"));
    }
    WorkerRecord& worker = wit->second.record;
    if (request.epoch() != worker.epoch || wit->second.dead) {
      return absl::AbortedError(absl::StrCat("stale epoch ", request.epoch(),
                                             " for worker ", request.name(),
                                             "; current is ", worker.epoch));
    }
    worker.last_seen_unix_ms = NowMs();
    writer_->UpsertWorker(worker);

    bool changed = false;
    for (const v1::LocalRank& lr : request.ranks()) {
      v1::KillOrder key;
      key.set_job_id(lr.job_id());
      key.set_attempt(lr.attempt());
      key.set_rank(lr.rank());
      auto jit = jobs_.find(lr.job_id());
      const bool current = jit != jobs_.end() &&
                           jit->second.record.attempt == lr.attempt() && lr.rank() >= 0 &&
                           lr.rank() < static_cast<int32_t>(jit->second.ranks.size()) &&
                           jit->second.ranks[lr.rank()].worker == request.name();
      if (!current) {
        // A rank of an earlier attempt or of a job that ended: stop it while it
        // runs, and forget it (and free its slot) once it is gone.
        if (lr.exited()) {
          if (jit != jobs_.end()) {
            auto& prev = jit->second.previous;
            const size_t before = prev.size();
            std::erase_if(prev, [&](const RankRecord& r) {
              return r.attempt == lr.attempt() && r.rank == lr.rank() &&
                     r.worker == request.name();
            });
            changed |= prev.size() != before;
            auto& lost = jit->second.lost;
            const size_t lost_before = lost.size();
            std::erase_if(lost, [&](const LostRank& l) {
              return l.rank.attempt == lr.attempt() && l.rank.rank == lr.rank() &&
                     l.rank.worker == request.name();
            });
            if (lost.size() != lost_before) {
              spdlog::info("job {}: lost rank {} of attempt {} on {} has exited",
                           lr.job_id(), lr.rank(), lr.attempt(), request.name());
              changed = true;
            }
          }
          *response.add_acknowledged_exits() = key;
        } else {
          spdlog::warn(
              "worker {} runs job {} attempt {} rank {}, which is not current; "
              "stopping it",
              request.name(), lr.job_id(), lr.attempt(), lr.rank());
          *response.add_kill() = key;
        }
        continue;
      }
      ActiveJob& job = jit->second;
      RankRecord& rank = job.ranks[lr.rank()];
      if (lr.exited()) {
        if (rank.state != kExited) {
          rank.state = kExited;
          rank.pid = lr.pid();
          rank.exit_code = lr.exit_code();
          rank.signal = lr.signal();
          rank.exit_reason = lr.launch_error().empty()
                                 ? ExitText(rank)
                                 : absl::StrCat("could not be launched: ",
                                                lr.launch_error().substr(0, 1024));
          if (job.kill_sent[lr.rank()])
            absl::StrAppend(&rank.exit_reason, " after a stop order");
          writer_->PutRanks({rank});
          spdlog::info("job {} attempt {} rank {} {}", job.record.id, job.record.attempt,
                       rank.rank, rank.exit_reason);
          EvaluateLocked(job, &releases);
          changed = true;
        }
        *response.add_acknowledged_exits() = key;
      } else if (rank.state == kExited) {
        // Counted as gone (its worker was declared dead) but still running: stop it.
        *response.add_kill() = key;
      } else if (rank.state == kAssigned || rank.pid != lr.pid()) {
        rank.state = kRunning;
        rank.pid = lr.pid();
        writer_->PutRanks({rank});
      }
    }

    // Ranks of earlier attempts that this worker no longer lists are not
    // running there: it lists every rank it started until told the exit was seen.
    std::set<std::tuple<int64_t, int32_t, int32_t>> listed;
    for (const v1::LocalRank& lr : request.ranks()) {
      listed.insert({lr.job_id(), lr.attempt(), lr.rank()});
    }
    for (auto& [job_id, job] : jobs_) {
      const int64_t id =
          job_id;  // lambdas cannot capture a structured binding (clang 14)
      auto gone = [&](const RankRecord& r) {
        return r.worker == request.name() && !listed.contains({id, r.attempt, r.rank});
      };
      const size_t before = job.previous.size() + job.lost.size();
      std::erase_if(job.previous, gone);
      std::erase_if(job.lost, [&](const LostRank& l) {
        if (!gone(l.rank)) return false;
        spdlog::info("job {}: lost rank {} of attempt {} does not run on {}", id,
                     l.rank.rank, l.rank.attempt, request.name());
        return true;
      });
      changed |= job.previous.size() + job.lost.size() != before;
    }

    // Orders for this worker: launches not yet seen running, stops not yet done.
    std::set<std::pair<int64_t, int32_t>> reported;
    for (const v1::LocalRank& lr : request.ranks())
      reported.insert({lr.job_id(), lr.rank()});
    for (auto& [id, job] : jobs_) {
      const std::vector<int32_t> local_ranks = LocalRanks(job.ranks);
      for (size_t r = 0; r < job.ranks.size(); ++r) {
        const RankRecord& rank = job.ranks[r];
        if (rank.worker != request.name()) continue;
        if (job.kill_sent[r] && rank.state != kExited) {
          v1::KillOrder* k = response.add_kill();
          k->set_job_id(id);
          k->set_attempt(job.record.attempt);
          k->set_rank(rank.rank);
        } else if (rank.state == kAssigned && !IsTerminal(job.record.state) &&
                   !reported.contains({id, rank.rank})) {
          // The trainer's lease may count from any launch order sent.
          job.last_contact[{job.record.attempt, rank.rank}] = clock_->Now();
          v1::LaunchOrder* l = response.add_launch();
          l->set_job_id(id);
          l->set_attempt(job.record.attempt);
          l->set_rank(rank.rank);
          l->set_world_size(static_cast<int32_t>(job.ranks.size()));
          l->set_local_rank(local_ranks[r]);
          l->set_slot(rank.slot);
          for (const RankRecord& peer : job.ranks) {
            if (peer.worker == rank.worker) l->add_local_slots(peer.slot);
          }
          *l->mutable_trainer() = job.record.spec.trainer();
          l->set_run_as(job.record.owner);
          *l->mutable_env() = job.record.spec.env();
          // A restarted attempt continues from the job's latest checkpoint.
          if (job.record.attempt > 1 &&
              !job.record.spec.trainer().checkpoint_dir().empty()) {
            l->mutable_trainer()->set_resume(true);
          }
        }
      }
    }
    if (changed) {
      ReapLocked();
      ScheduleLocked();
    }
  }
  // The worker's last heartbeat time (and maybe its ranks) changed.
  changes_.Notify();
  RunReleases(releases);
  return response;
}

void JobManager::EvaluateLocked(ActiveJob& job, Rendezvous::Releases* releases) {
  if (IsTerminal(job.record.state) || job.ranks.empty()) return;
  const RankRecord* failed = nullptr;
  bool all_clean = true;
  for (const auto& r : job.ranks) {
    if (r.state == kExited && !ExitedCleanly(r) && failed == nullptr) failed = &r;
    if (!ExitedCleanly(r)) all_clean = false;
  }
  if (failed != nullptr) {
    FailAttemptLocked(job,
                      absl::StrCat("rank ", failed->rank, " on ", failed->worker, " ",
                                   failed->exit_reason),
                      releases);
    return;
  }
  if (all_clean) {
    rendezvous_.Close(job.record.id, job.record.attempt, absl::OkStatus());
    Transition(job, v1::JOB_STATE_SUCCEEDED,
               absl::StrCat("all ", job.ranks.size(), " ranks exited with code 0"));
  }
}

void JobManager::FailAttemptLocked(ActiveJob& job, const std::string& reason,
                                   Rendezvous::Releases* releases) {
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    if (job.ranks[r].state != kExited) job.kill_sent[r] = true;
  }
  auto closed =
      rendezvous_.Close(job.record.id, job.record.attempt, absl::AbortedError(reason));
  for (auto& c : closed) releases->push_back(std::move(c));
  const int32_t restarts_used = job.record.attempt - 1;
  if (restarts_used < job.record.spec.max_restarts()) {
    // The survivors keep their slots until they are gone; the next attempt is
    // placed once the slots are free.
    for (auto& r : job.ranks) {
      if (r.state != kExited) job.previous.push_back(r);
    }
    job.ranks.clear();
    job.kill_sent.clear();
    const std::string hold =
        job.lost.empty() ? "" : absl::StrCat("; ", HoldReasonLocked(job));
    Transition(job, v1::JOB_STATE_QUEUED,
               absl::StrCat("attempt ", job.record.attempt, " failed: ", reason,
                            "; restarting (restart ", restarts_used + 1, " of ",
                            job.record.spec.max_restarts(), ")", hold));
    return;
  }
  Transition(job, v1::JOB_STATE_FAILED, reason);
}

void JobManager::DeclareDeadLocked(WorkerState& worker, Rendezvous::Releases* releases) {
  worker.dead = true;
  // Fence the session: the worker's next heartbeat is refused, so it must
  // register again, and then stops every rank that is no longer current.
  worker.record.epoch += 1;
  writer_->UpsertWorker(worker.record);
  const std::string why = absl::StrCat(
      "worker ", worker.record.name, " declared dead (no heartbeat for ",
      absl::FormatDuration(clock_->Now() -
                           absl::FromUnixMillis(worker.record.last_seen_unix_ms)),
      ")");
  spdlog::warn("{}", why);
  for (auto& [id, job] : jobs_) {
    // Whether the worker's ranks stopped is unknown from here on: behind a
    // partition they may run on until their leases run out.
    for (const RankRecord& r : job.previous) {
      if (r.worker == worker.record.name) LoseRankLocked(job, r);
    }
    std::erase_if(job.previous,
                  [&](const RankRecord& r) { return r.worker == worker.record.name; });
    bool lost = false;
    for (auto& r : job.ranks) {
      if (r.worker != worker.record.name || r.state == kExited) continue;
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
  Rendezvous::Releases releases;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    bool changed = false;
    for (auto& [name, worker] : workers_) {
      if (!worker.dead && now - absl::FromUnixMillis(worker.record.last_seen_unix_ms) >
                              options_.worker_dead_after) {
        DeclareDeadLocked(worker, &releases);
        changed = true;
      }
    }
    for (auto& [job_id, job] : jobs_) {
      const int64_t id =
          job_id;  // lambdas cannot capture a structured binding (clang 14)
      const size_t before = job.lost.size();
      std::erase_if(job.lost, [&](const LostRank& l) {
        if (l.deadline > now) return false;
        spdlog::info(
            "job {}: the lease of lost rank {} of attempt {} on {} has run out; the "
            "rank has stopped itself",
            id, l.rank.rank, l.rank.attempt, l.rank.worker);
        return true;
      });
      changed |= job.lost.size() != before;
    }
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
          &releases);
      changed = true;
    }
    if (changed) {
      ReapLocked();
      ScheduleLocked();
    }
  }
  RunReleases(releases);
}

void JobManager::ReapLocked() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const ActiveJob& job = it->second;
    bool done = IsTerminal(job.record.state) && job.previous.empty() &&
                std::all_of(job.ranks.begin(), job.ranks.end(),
                            [](const RankRecord& r) { return r.state == kExited; });
    it = done ? jobs_.erase(it) : std::next(it);
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
  const absl::Time deadline = from + lease * (1 + options_.trainer_lease_margin_ratio) +
                              options_.trainer_lease_margin;
  spdlog::warn(
      "job {} attempt {} rank {} on {} is lost: it may run until its lease runs out, "
      "at most {} from now",
      job.record.id, rank.attempt, rank.rank, rank.worker,
      absl::FormatDuration(absl::Trunc(deadline - now, absl::Milliseconds(100))));
  job.lost.push_back(LostRank{rank, now, deadline});
}

std::string JobManager::HoldReasonLocked(const ActiveJob& job) const {
  const absl::Time now = clock_->Now();
  std::string who;
  int count = 0;
  absl::Time since = absl::InfiniteFuture();
  absl::Time until = now;
  for (const LostRank& l : job.lost) {
    if (l.deadline <= now) continue;
    ++count;
    absl::StrAppend(&who, who.empty() ? "" : ", ", "rank ", l.rank.rank, " of attempt ",
                    l.rank.attempt, " on ", l.rank.worker);
    since = std::min(since, l.lost_at);
    until = std::max(until, l.deadline);
  }
  if (count > 0) {
    // Counted from when the ranks were lost, so the text stays the same while
    // the job waits.
    return absl::StrCat(
        "waiting up to ",
        absl::ToInt64Seconds(absl::Ceil(until - since, absl::Seconds(1))),
        "s for the lost rank", count == 1 ? "'s lease" : "s' leases", " to expire (", who,
        ") unless ", count == 1 ? "its worker confirms it" : "their workers confirm they",
        " stopped");
  }
  for (const RankRecord& r : job.previous) {
    absl::StrAppend(&who, who.empty() ? "" : ", ", "rank ", r.rank, " of attempt ",
                    r.attempt, " on ", r.worker);
  }
  if (who.empty()) return "";
  return absl::StrCat("waiting for the failed attempt's ranks to stop (", who, ")");
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
  return options_.trainer_lease;
}

void JobManager::Transition(ActiveJob& job, v1::JobState to, std::string reason) {
  spdlog::info("job {} {} -> {}: {}", job.record.id, JobStateName(job.record.state),
               JobStateName(to), reason);
  const int64_t now = NowMs();
  if (to != job.record.state) {
    job.events.push_back(JobEvent{job.record.id, now, job.record.state, to, reason});
  }
  job.record.state = to;
  job.record.reason = std::move(reason);
  if (to == v1::JOB_STATE_QUEUED) job.queued_at = clock_->Now();
  if (to != v1::JOB_STATE_QUEUED) job.record.pending_reason.clear();
  job.record.updated_unix_ms = now;
  writer_->UpdateJob(job.record);
  changes_.Notify();
}

void JobManager::ScheduleLocked() {
  std::vector<PendingJob> queue;
  for (auto& [id, job] : jobs_) {
    if (job.record.state == v1::JOB_STATE_QUEUED) {
      // No next attempt while a rank of an earlier one may still run: the
      // same (job, rank) would run twice.
      const std::string hold = HoldReasonLocked(job);
      if (!hold.empty()) {
        if (job.record.pending_reason != hold) {
          job.record.pending_reason = hold;
          job.record.updated_unix_ms = NowMs();
          writer_->UpdateJob(job.record);
        }
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
                                 .per_node = spec.per_node()});
    }
  }
  if (queue.empty()) return;
  std::map<std::string, std::vector<int32_t>> used;
  for (const auto& [id, job] : jobs_) {
    for (const auto& r : job.ranks) {
      if (r.state != kExited) used[r.worker].push_back(r.slot);
    }
    for (const auto& r : job.previous) used[r.worker].push_back(r.slot);
  }
  std::vector<WorkerInventory> inventory;
  for (const auto& [name, w] : workers_) {
    inventory.push_back(
        WorkerInventory{name, w.record.slots, used[name], WorkerAlive(w.record)});
  }
  ScheduleResult result =
      Schedule(queue, inventory, clock_->Now(),
               SchedulerOptions{.reserve_after = options_.reserve_after});
  for (const Placement& placement : result.placements) {
    ActiveJob& job = jobs_.at(placement.job_id);
    job.record.attempt += 1;
    job.ranks.clear();
    std::vector<int32_t> local_ranks;
    for (const RankPlacement& rp : placement.ranks) {
      RankRecord rank;
      rank.job_id = placement.job_id;
      rank.attempt = job.record.attempt;
      rank.rank = rp.rank;
      rank.worker = rp.worker;
      rank.slot = rp.slot;
      rank.state = kAssigned;
      job.ranks.push_back(rank);
      local_ranks.push_back(rp.local_rank);
    }
    job.kill_sent.assign(job.ranks.size(), false);
    job.placed_at = clock_->Now();
    for (const RankRecord& r : job.ranks) {
      job.last_contact[{r.attempt, r.rank}] = job.placed_at;
    }
    rendezvous_.Open(placement.job_id, job.record.attempt, std::move(local_ranks));
    writer_->PutRanks(job.ranks);
    std::string where;
    for (const auto& r : job.ranks) {
      absl::StrAppend(&where, where.empty() ? "" : ", ", r.rank, "->", r.worker, "/",
                      r.slot);
    }
    Transition(job, v1::JOB_STATE_SCHEDULED,
               absl::StrCat("attempt ", job.record.attempt, " placed: ", where));
  }
  for (const auto& [id, reason] : result.pending_reasons) {
    ActiveJob& job = jobs_.at(id);
    if (job.record.pending_reason != reason) {
      job.record.pending_reason = reason;
      job.record.updated_unix_ms = NowMs();
      writer_->UpdateJob(job.record);
    }
  }
}

void JobManager::Rendezvous(
    const v1::RendezvousRequest& request,
    std::function<void(absl::StatusOr<v1::RendezvousResponse>)> done) {
  if (request.bootstrap().size() > 4096) {
    done(absl::InvalidArgumentError("bootstrap: larger than 4096 bytes"));
    return;
  }
  Rendezvous::Releases releases;
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
  if (request.points_size() > options_.max_points_per_report) {
    done(absl::InvalidArgumentError(
        absl::StrCat("at most ", options_.max_points_per_report, " points per report")));
    return;
  }
  std::vector<MetricRow> rows;
  rows.reserve(request.points_size());
  for (const v1::MetricPoint& p : request.points()) {
    if (p.name().empty() || p.name().size() > 128) {
      done(absl::InvalidArgumentError("metric name: must be 1-128 characters"));
      return;
    }
    rows.push_back(MetricRow{request.job_id(), request.attempt(), request.rank(),
                             p.step(), p.name(), p.value(), p.unix_ms()});
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) {
      done(absl::NotFoundError(absl::StrCat("job ", request.job_id(), " is not active")));
      return;
    }
    if (request.rank() < 0 ||
        request.rank() >= static_cast<int32_t>(it->second.ranks.size())) {
      done(absl::InvalidArgumentError(
          absl::StrCat("rank ", request.rank(), " is outside the job")));
      return;
    }
    // Enqueued under the lock so the rows are ordered with the job's state changes.
    writer_->AppendMetrics(std::move(rows),
                           [this, done = std::move(done)](absl::Status status) {
                             if (status.ok()) changes_.Notify();
                             done(std::move(status));
                           });
  }
}

absl::Status JobManager::ReportResult(const v1::ReportResultRequest& request) {
  if (request.param_hash().size() > 128) {
    return absl::InvalidArgumentError("param_hash: longer than 128 characters");
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
  writer_->PutRanks({rank});
  changes_.Notify();
  return absl::OkStatus();
}

absl::StatusOr<v1::JobState> JobManager::CancelJob(int64_t job_id) {
  Rendezvous::Releases releases;
  std::optional<v1::JobState> ended;  // set when the job had already ended
  {
    absl::MutexLock lock(&mu_);
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
      Transition(job, v1::JOB_STATE_CANCELLED, "cancelled by user");
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
  if (request.data().size() > 4 * 1024 * 1024) {
    return absl::InvalidArgumentError("log chunk larger than 4 MiB");
  }
  if (request.offset() < 0) return absl::InvalidArgumentError("negative log offset");
  {
    absl::MutexLock lock(&mu_);
    auto wit = workers_.find(request.name());
    if (wit == workers_.end() || wit->second.record.epoch != request.epoch() ||
        wit->second.dead) {
      return absl::AbortedError(
          absl::StrCat("stale or unknown session for worker ", request.name()));
    }
  }
  LogChunk chunk{request.job_id(), request.attempt(), request.rank(), request.offset(),
                 request.data()};
  absl::Status appended = store_->AppendLog(chunk);
  if (!appended.ok() && !absl::IsFailedPrecondition(appended)) return appended;
  ASSIGN_OR_RETURN(int64_t end,
                   store_->LogEnd(request.job_id(), request.attempt(), request.rank()));
  if (request.eof() && appended.ok()) {
    absl::MutexLock lock(&mu_);
    logs_complete_.insert({request.job_id(), request.attempt(), request.rank()});
  }
  if (appended.ok()) changes_.Notify();
  v1::ShipLogsResponse response;
  response.set_next_offset(end);
  return response;
}

absl::StatusOr<v1::GetLogsResponse> JobManager::GetLogs(
    const v1::GetLogsRequest& request) {
  int32_t attempt = request.attempt();
  bool job_active = false;
  bool rank_exited = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end()) {
      job_active = true;
      if (attempt <= 0) attempt = it->second.record.attempt;
      if (attempt == it->second.record.attempt && request.rank() >= 0 &&
          request.rank() < static_cast<int32_t>(it->second.ranks.size())) {
        rank_exited = it->second.ranks[request.rank()].state == kExited;
      } else if (attempt < it->second.record.attempt) {
        rank_exited = true;
      }
    }
  }
  if (!job_active) {
    writer_->Flush();  // the job's last state change may still be queued
    absl::StatusOr<JobRecord> record = store_->GetJob(request.job_id());
    if (absl::IsNotFound(record.status())) {
      return absl::NotFoundError(absl::StrCat("job ", request.job_id(), " not found"));
    }
    RETURN_IF_ERROR(record.status());
    if (attempt <= 0) attempt = record->attempt;
    rank_exited = true;
  }
  if (request.rank() < 0) return absl::InvalidArgumentError("rank: must be >= 0");
  const int64_t max_bytes =
      request.max_bytes() > 0 ? std::min(request.max_bytes(), 4 * 1024 * 1024) : 1 << 20;
  int64_t offset = std::max<int64_t>(0, request.offset());
  if (request.tail_bytes() > 0) {
    ASSIGN_OR_RETURN(const int64_t end,
                     store_->LogEnd(request.job_id(), attempt, request.rank()));
    offset = std::max<int64_t>(0, end - request.tail_bytes());
  }
  ASSIGN_OR_RETURN(std::string data, store_->ReadLog(request.job_id(), attempt,
                                                     request.rank(), offset, max_bytes));
  v1::GetLogsResponse response;
  response.set_attempt(attempt);
  response.set_offset(offset);
  response.set_next_offset(offset + static_cast<int64_t>(data.size()));
  bool eof_seen = false;
  {
    absl::MutexLock lock(&mu_);
    eof_seen = logs_complete_.contains({request.job_id(), attempt, request.rank()});
  }
  // Complete once the rank is gone and either its worker sent the end of the
  // log or the job is no longer active (its worker may be gone for good).
  response.set_complete(data.empty() && rank_exited && (eof_seen || !job_active));
  response.set_data(std::move(data));
  return response;
}

void JobManager::Shutdown() {
  Rendezvous::Releases releases;
  {
    absl::MutexLock lock(&mu_);
    releases =
        rendezvous_.CloseAll(absl::UnavailableError("coordinator is shutting down"));
  }
  RunReleases(releases);
}

}  // namespace tessera
