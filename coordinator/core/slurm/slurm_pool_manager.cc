#include "coordinator/core/slurm/slurm_pool_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/core/slurm/slurm_script.h"
#include "spdlog/spdlog.h"

namespace tessera {

SlurmPoolManager::SlurmPoolManager(std::vector<SlurmPoolConfig> pools,
                                   SlurmClient* client, const Clock* clock,
                                   CredentialWriter credentials,
                                   SlurmPoolManagerOptions options,
                                   CredentialRevoker revoke)
    : pools_(std::move(pools)),
      client_(client),
      clock_(clock),
      credentials_(std::move(credentials)),
      revoke_(std::move(revoke)),
      options_(std::move(options)) {}

void SlurmPoolManager::Revoke(const std::string& credential) const {
  if (revoke_ && !credential.empty()) revoke_(credential);
}

const SlurmPoolConfig* SlurmPoolManager::Pool(const std::string& name) const {
  for (const SlurmPoolConfig& p : pools_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string SlurmPoolManager::SubmitAccount(const SlurmPoolConfig& pool,
                                            const std::string& owner) const {
  if (!pool.submit_as_owner || !options_.can_submit_as_owner) return "";
  if (owner.empty() || owner == "root") return "";
  return owner;
}

bool SlurmPoolManager::TickIfDue(SlurmPoolSource& source) {
  absl::MutexLock tick(&tick_mu_);
  if (clock_->Now() - last_tick_ < options_.interval) return false;
  last_tick_ = clock_->Now();
  SlurmPoolSnapshot snapshot = source.SlurmSnapshot();  // takes the source's lock
  const TickResult result = Round(snapshot.waiting, std::move(snapshot.workers));
  for (const std::string& line : result.events) spdlog::info("slurm: {}", line);
  return true;
}

SlurmPoolManager::TickResult SlurmPoolManager::Tick(
    const std::vector<WaitingJob>& waiting, std::vector<SlurmPoolWorker> workers) {
  absl::MutexLock tick(&tick_mu_);
  return Round(waiting, std::move(workers));
}

SlurmPoolManager::TickResult SlurmPoolManager::Round(
    const std::vector<WaitingJob>& waiting, std::vector<SlurmPoolWorker> workers) {
  TickResult result;
  const absl::Time now = clock_->Now();
  TrackIdle(workers, now);
  const SlurmPoolState state = Observe(waiting, workers, now, &result);
  const SlurmPoolPlan plan = PlanSlurmPools(pools_, state, now, options_.plan);
  result.pending_reasons = plan.pending_reasons;
  result.reserved_workers = plan.reserved_workers;
  Cancel(plan.cancel, &result);
  Forget(plan.forget, &result);
  for (const SlurmSubmitDecision& d : plan.submit) Submit(d, now, &result);
  absl::MutexLock lock(&mu_);
  pending_reasons_ = result.pending_reasons;
  reserved_workers_ = result.reserved_workers;
  return result;
}

void SlurmPoolManager::TrackIdle(std::vector<SlurmPoolWorker>& workers, absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, absl::Time> seen;
  for (SlurmPoolWorker& w : workers) {
    auto it = idle_since_.find(w.name);
    absl::Time since = it == idle_since_.end() ? now : it->second;
    if (w.running_ranks > 0) {
      since = absl::InfiniteFuture();
    } else if (since == absl::InfiniteFuture()) {
      since = now;
    }
    w.idle_since = since;
    seen[w.name] = since;
  }
  idle_since_ = std::move(seen);  // workers gone from the pools are forgotten
}

std::optional<std::string> SlurmPoolManager::PendingReason(int64_t job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = pending_reasons_.find(job_id);
  if (it == pending_reasons_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, int64_t> SlurmPoolManager::ReservedWorkers() const {
  absl::MutexLock lock(&mu_);
  return reserved_workers_;
}

SlurmPoolState SlurmPoolManager::Observe(const std::vector<WaitingJob>& waiting,
                                         const std::vector<SlurmPoolWorker>& workers,
                                         absl::Time now, TickResult* result) {
  // Slurm's view of the allocations (no lock held while squeue runs).
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const SlurmAllocation& a : allocations_) ids.push_back(a.slurm_job_id);
  }
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> seen = client_->Query(ids);
  SlurmPoolState state;
  absl::MutexLock lock(&mu_);
  if (seen.ok()) {
    for (SlurmAllocation& a : allocations_) {
      auto it = seen->find(a.slurm_job_id);
      if (it == seen->end()) {
        a.state.clear();  // ended and purged
        a.reason.clear();
        continue;
      }
      a.state = it->second.state;
      a.reason = it->second.reason;
      if (IsSlurmStatePending(a.state) &&
          std::any_of(workers.begin(), workers.end(), [&](const SlurmPoolWorker& w) {
            return w.slurm_job_id == a.slurm_job_id;
          })) {
        a.state = "R";  // squeue lags: a worker of it is registered
        a.reason.clear();
      }
      if (!IsSlurmStatePending(a.state) && !IsSlurmStateFinal(a.state) &&
          a.running_since == absl::InfiniteFuture()) {
        a.running_since = now;
      }
    }
  } else if (!ids.empty()) {
    // Keep the last known states: a failed squeue must not look like ended jobs.
    result->events.push_back(
        absl::StrCat("cannot query Slurm: ", seen.status().message()));
  }
  // Failures of jobs that no longer wait are of no use.
  std::erase_if(failures_, [&](const SlurmSubmitFailure& f) {
    return std::none_of(waiting.begin(), waiting.end(),
                        [&](const WaitingJob& j) { return j.job_id == f.job_id; });
  });
  state.allocations = allocations_;
  state.failures = failures_;
  state.waiting = waiting;
  state.workers = workers;
  return state;
}

void SlurmPoolManager::Cancel(const std::vector<SlurmCancelDecision>& cancels,
                              TickResult* result) {
  for (const SlurmCancelDecision& c : cancels) {
    absl::Status s = client_->Cancel(c.slurm_job_id);
    if (!s.ok()) {
      result->events.push_back(absl::StrCat("cannot cancel Slurm allocation ",
                                            c.slurm_job_id, " (", c.reason,
                                            "): ", s.message()));
      continue;
    }
    result->events.push_back(
        absl::StrCat("cancelled Slurm allocation ", c.slurm_job_id, ": ", c.reason));
    absl::MutexLock lock(&mu_);
    for (SlurmAllocation& a : allocations_) {
      if (a.slurm_job_id == c.slurm_job_id) a.cancel_sent = true;
    }
  }
}

void SlurmPoolManager::Forget(const std::vector<std::string>& ended, TickResult* result) {
  std::vector<std::string> credentials;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : ended) {
      auto it =
          std::find_if(allocations_.begin(), allocations_.end(),
                       [&](const SlurmAllocation& a) { return a.slurm_job_id == id; });
      if (it == allocations_.end()) continue;
      result->events.push_back(
          absl::StrCat("Slurm allocation ", id, " of job ", it->job_id, " has ended",
                       it->state.empty() ? "" : " (" + it->state + ")"));
      credentials.push_back(it->credential);
      allocations_.erase(it);
    }
  }
  // Its workers are gone: their join credential must not let anyone else in.
  for (const std::string& c : credentials) Revoke(c);
}

absl::StatusOr<std::string> SlurmPoolManager::Sbatch(const SlurmPoolConfig& pool,
                                                     const SlurmSubmitDecision& d,
                                                     std::string* run_as,
                                                     std::string* credential,
                                                     TickResult* result) {
  absl::StatusOr<std::string> id;
  for (int attempt = 0; attempt < 2; ++attempt) {
    Revoke(*credential);  // written for an account that could not submit
    credential->clear();
    absl::StatusOr<std::string> token = credentials_(d, *run_as);
    if (!token.ok()) return token.status();
    *credential = *token;
    absl::StatusOr<std::string> script =
        RenderSbatchScript(pool, {.job_id = d.job_id,
                                  .nodes = d.nodes,
                                  .coordinator_address = options_.coordinator_address,
                                  .join_token_file = *token});
    if (!script.ok()) return script.status();
    id = client_->Submit(
        {.script = *script, .run_as = *run_as, .working_dir = options_.submit_dir});
    // An owner without an account here (or rights we lack): the service
    // account submits, and the owner stays recorded on the allocation.
    const bool account_problem =
        !id.ok() && !run_as->empty() &&
        (id.status().code() == absl::StatusCode::kNotFound ||
         id.status().code() == absl::StatusCode::kPermissionDenied);
    if (!account_problem) break;
    result->events.push_back(absl::StrCat("cannot submit as ", *run_as, " (",
                                          id.status().message(),
                                          "); submitting as the service account"));
    run_as->clear();
  }
  return id;
}

void SlurmPoolManager::Submit(const SlurmSubmitDecision& d, absl::Time now,
                              TickResult* result) {
  const SlurmPoolConfig* pool = Pool(d.pool);
  if (pool == nullptr) return;
  std::string run_as = SubmitAccount(*pool, d.owner);
  std::string credential;
  const absl::StatusOr<std::string> id = Sbatch(*pool, d, &run_as, &credential, result);
  if (!id.ok()) Revoke(credential);
  absl::MutexLock lock(&mu_);
  std::erase_if(failures_, [&](const SlurmSubmitFailure& f) {
    return f.pool == d.pool && f.job_id == d.job_id;
  });
  if (!id.ok()) {
    failures_.push_back({d.pool, d.job_id, std::string(id.status().message()), now});
    const std::string why = absl::StrCat("Slurm submission to pool ", d.pool,
                                         " failed: ", id.status().message());
    result->pending_reasons[d.job_id] = why;
    result->events.push_back(absl::StrCat("job ", d.job_id, ": ", why));
    return;
  }
  SlurmAllocation a;
  a.pool = d.pool;
  a.slurm_job_id = *id;
  a.job_id = d.job_id;
  a.owner = d.owner;
  a.nodes = d.nodes;
  a.submitted_at = now;
  a.state = "PD";
  a.credential = credential;
  allocations_.push_back(a);
  result->pending_reasons[d.job_id] = SlurmWaitReason(a, 0);
  result->events.push_back(absl::StrCat("submitted Slurm allocation ", *id, " (", d.nodes,
                                        " node", d.nodes == 1 ? "" : "s", ") for job ",
                                        d.job_id, " in pool ", d.pool, " as ",
                                        run_as.empty() ? "the service account" : run_as));
}

void SlurmPoolManager::WorkerJoined(const std::string& slurm_job_id) {
  absl::MutexLock lock(&mu_);
  for (SlurmAllocation& a : allocations_) {
    if (a.slurm_job_id != slurm_job_id || !IsSlurmStatePending(a.state)) continue;
    a.state = "R";
    a.reason.clear();
    if (a.running_since == absl::InfiniteFuture()) a.running_since = clock_->Now();
  }
}

std::optional<SlurmAllocation> SlurmPoolManager::Allocation(int64_t job_id) const {
  absl::MutexLock lock(&mu_);
  for (const SlurmAllocation& a : allocations_) {
    if (a.job_id == job_id && !a.cancel_sent) return a;
  }
  return std::nullopt;
}

std::vector<SlurmAllocation> SlurmPoolManager::Allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

}  // namespace tessera
