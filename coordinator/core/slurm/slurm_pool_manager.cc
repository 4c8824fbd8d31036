#include "coordinator/core/slurm/slurm_pool_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/slurm/slurm_script.h"
#include "spdlog/spdlog.h"

namespace tessera {

namespace {

int64_t UnixMsOr0(absl::Time t) {
  return t == absl::InfiniteFuture() || t == absl::InfinitePast() ? 0
                                                                  : absl::ToUnixMillis(t);
}

SlurmAllocationRecord ToRecord(const SlurmAllocation& a) {
  SlurmAllocationRecord r;
  r.slurm_job_id = a.slurm_job_id;
  r.pool = a.pool;
  r.job_id = a.job_id;
  r.owner = a.owner;
  r.submitted_as = a.submitted_as;
  r.nodes = a.nodes;
  r.state = a.state;
  r.cancel_sent = a.cancel_sent;
  r.credential_path = a.credential.path;
  r.credential_id = a.credential.id;
  r.submitted_unix_ms = UnixMsOr0(a.submitted_at);
  r.running_since_unix_ms = UnixMsOr0(a.running_since);
  return r;
}

SlurmAllocation FromRecord(const SlurmAllocationRecord& r) {
  SlurmAllocation a;
  a.slurm_job_id = r.slurm_job_id;
  a.pool = r.pool;
  a.job_id = r.job_id;
  a.owner = r.owner;
  a.submitted_as = r.submitted_as;
  a.nodes = r.nodes;
  a.state = r.state;
  a.cancel_sent = r.cancel_sent;
  a.credential = {r.credential_path, r.credential_id};
  a.submitted_at = absl::FromUnixMillis(r.submitted_unix_ms);
  if (r.running_since_unix_ms > 0) {
    a.running_since = absl::FromUnixMillis(r.running_since_unix_ms);
  }
  return a;
}

// `a` as squeue's answer `seen` shows it at `now`.
SlurmAllocation Observed(SlurmAllocation a,
                         const std::map<std::string, SlurmJobInfo>& seen,
                         const std::vector<SlurmPoolWorker>& workers, absl::Time now) {
  auto it = seen.find(a.slurm_job_id);
  if (it == seen.end()) {
    a.state.clear();  // ended and purged
    a.reason.clear();
    return a;
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
  return a;
}

}  // namespace

std::string SlurmCredentialName(const std::string& pool, int64_t job_id) {
  return absl::StrCat("slurm-", pool, "-job", job_id);
}

SlurmPoolManager::SlurmPoolManager(std::vector<SlurmPoolConfig> pools,
                                   SlurmClient* client, Store* store, const Clock* clock,
                                   CredentialWriter credentials,
                                   SlurmPoolManagerOptions options,
                                   CredentialRevoker revoke)
    : pools_(std::move(pools)),
      client_(client),
      store_(store),
      clock_(clock),
      credentials_(std::move(credentials)),
      revoke_(std::move(revoke)),
      options_(std::move(options)) {}

void SlurmPoolManager::Revoke(const SlurmCredential& credential) const {
  if (revoke_ && !credential.empty()) revoke_(credential);
}

void SlurmPoolManager::Persist(const std::string& slurm_job_id, TickResult* result) {
  std::optional<SlurmAllocationRecord> record;
  {
    absl::MutexLock lock(&mu_);
    for (const SlurmAllocation& a : allocations_) {
      if (a.slurm_job_id == slurm_job_id) record = ToRecord(a);
    }
  }
  // Disk I/O: no lock held.
  const absl::Status s = record.has_value() ? store_->PutSlurmAllocation(*record)
                                            : store_->DeleteSlurmAllocation(slurm_job_id);
  if (!s.ok()) {
    result->events.push_back(
        absl::StrCat("cannot store Slurm allocation ", slurm_job_id, ": ", s.message()));
  }
}

absl::Status SlurmPoolManager::Load(TickResult* result) {
  absl::StatusOr<std::vector<SlurmAllocationRecord>> stored =
      store_->ListSlurmAllocations();
  if (!stored.ok()) return stored.status();
  for (const SlurmAllocationRecord& r : *stored) unchecked_.insert(r.slurm_job_id);
  if (!stored->empty()) {
    result->events.push_back(
        absl::StrCat("found ", stored->size(), " Slurm allocations in the store"));
  }
  RevokeUnrecordedCredentials(*stored, result);
  absl::MutexLock lock(&mu_);
  for (const SlurmAllocationRecord& r : *stored) allocations_.push_back(FromRecord(r));
  return absl::OkStatus();
}

void SlurmPoolManager::RevokeUnrecordedCredentials(
    const std::vector<SlurmAllocationRecord>& stored, TickResult* result) {
  absl::StatusOr<std::vector<TokenRecord>> tokens = store_->ListTokens();
  if (!tokens.ok()) {
    result->events.push_back(
        absl::StrCat("cannot list the join credentials: ", tokens.status().message()));
    return;
  }
  std::set<int64_t> held;
  for (const SlurmAllocationRecord& r : stored) held.insert(r.credential_id);
  for (const TokenRecord& t : *tokens) {
    if (t.kind != kJoinToken || t.revoked || held.contains(t.id)) continue;
    // SlurmCredentialName(pool, job) for one of this manager's pools.
    const bool ours = std::any_of(pools_.begin(), pools_.end(), [&](const auto& p) {
      absl::string_view job = t.name;
      int64_t job_id = 0;
      return absl::ConsumePrefix(&job, absl::StrCat("slurm-", p.name, "-job")) &&
             absl::SimpleAtoi(job, &job_id) &&
             SlurmCredentialName(p.name, job_id) == t.name;
    });
    if (!ours) continue;
    Revoke(SlurmCredential{.path = "", .id = t.id});
    result->events.push_back(absl::StrCat(
        "revoked join credential ", t.id, " (", t.name,
        "): no stored allocation holds it, so the previous coordinator stopped while "
        "submitting; an allocation sbatch made with it cannot join and ends"));
  }
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
  if (!loaded_) {
    // Until the stored allocations are known, none are submitted either.
    if (absl::Status s = Load(&result); !s.ok()) {
      result.events.push_back(
          absl::StrCat("cannot read the stored Slurm allocations: ", s.message()));
      return result;
    }
    loaded_ = true;
  }
  const absl::Time now = clock_->Now();
  TrackIdle(workers, now);
  bool queried = false;
  SlurmPoolState state = Observe(waiting, workers, now, &queried, &result);
  if (!unchecked_.empty() && queried) {
    CancelUnneeded(state, &result);
    unchecked_.clear();
    absl::MutexLock lock(&mu_);
    state.allocations = allocations_;
  }
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
                                         absl::Time now, bool* queried,
                                         TickResult* result) {
  // Slurm's view of the allocations (no lock held while squeue runs).
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const SlurmAllocation& a : allocations_) ids.push_back(a.slurm_job_id);
  }
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> seen = client_->Query(ids);
  *queried = seen.ok();
  SlurmPoolState state;
  std::vector<std::string> changed;  // stored again below
  {
    absl::MutexLock lock(&mu_);
    if (seen.ok()) {
      for (SlurmAllocation& a : allocations_) {
        const std::string before = a.state;
        const absl::Time running_since = a.running_since;
        a = Observed(std::move(a), *seen, workers, now);
        if (a.state != before || a.running_since != running_since) {
          changed.push_back(a.slurm_job_id);
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
  }
  for (const std::string& id : changed) Persist(id, result);
  state.waiting = waiting;
  state.workers = workers;
  return state;
}

void SlurmPoolManager::CancelUnneeded(const SlurmPoolState& state, TickResult* result) {
  for (const SlurmAllocation& a : state.allocations) {
    if (!unchecked_.contains(a.slurm_job_id)) continue;  // submitted by this manager
    if (a.cancel_sent || a.state.empty() || IsSlurmStateFinal(a.state)) continue;
    const bool job_waits =
        std::any_of(state.waiting.begin(), state.waiting.end(),
                    [&](const WaitingJob& j) { return j.job_id == a.job_id; });
    const bool busy =
        std::any_of(state.workers.begin(), state.workers.end(), [&](const auto& w) {
          return w.slurm_job_id == a.slurm_job_id && w.running_ranks > 0;
        });
    if (job_waits || busy) continue;
    const std::string why = absl::StrCat(
        "no job needs it after a coordinator restart (job ", a.job_id, " does not wait)");
    // The join credential goes first, so that no worker joins with it from
    // the moment Slurm shows the cancel; the workers that joined hold
    // credentials of their own.
    Revoke(a.credential);
    absl::Status s = client_->Cancel(a.slurm_job_id);
    if (s.ok()) {
      result->events.push_back(
          absl::StrCat("cancelled Slurm allocation ", a.slurm_job_id, ": ", why));
    } else {
      result->events.push_back(absl::StrCat("cannot cancel Slurm allocation ",
                                            a.slurm_job_id, " (", why,
                                            "): ", s.message()));
    }
    {
      absl::MutexLock lock(&mu_);
      for (SlurmAllocation& mine : allocations_) {
        if (mine.slurm_job_id != a.slurm_job_id) continue;
        mine.cancel_sent = s.ok();
        mine.credential = {};
      }
    }
    Persist(a.slurm_job_id, result);
  }
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
    {
      absl::MutexLock lock(&mu_);
      for (SlurmAllocation& a : allocations_) {
        if (a.slurm_job_id == c.slurm_job_id) a.cancel_sent = true;
      }
    }
    Persist(c.slurm_job_id, result);
  }
}

void SlurmPoolManager::Forget(const std::vector<std::string>& ended, TickResult* result) {
  std::vector<SlurmCredential> credentials;
  std::vector<std::string> forgotten;
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
      forgotten.push_back(id);
      allocations_.erase(it);
    }
  }
  // Its workers are gone: their join credential must not let anyone else in.
  for (const SlurmCredential& c : credentials) Revoke(c);
  for (const std::string& id : forgotten) Persist(id, result);  // removes it
}

absl::StatusOr<std::string> SlurmPoolManager::Sbatch(const SlurmPoolConfig& pool,
                                                     const SlurmSubmitDecision& d,
                                                     std::string* run_as,
                                                     SlurmCredential* credential,
                                                     TickResult* result) {
  absl::StatusOr<std::string> id;
  for (int attempt = 0; attempt < 2; ++attempt) {
    Revoke(*credential);  // written for an account that could not submit
    *credential = {};
    absl::StatusOr<SlurmCredential> written = credentials_(d, *run_as);
    if (!written.ok()) return written.status();
    *credential = *written;
    absl::StatusOr<std::string> script =
        RenderSbatchScript(pool, {.job_id = d.job_id,
                                  .nodes = d.nodes,
                                  .coordinator_address = options_.coordinator_address,
                                  .join_token_file = written->path});
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
  SlurmCredential credential;
  const absl::StatusOr<std::string> id = Sbatch(*pool, d, &run_as, &credential, result);
  if (!id.ok()) Revoke(credential);
  {
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
    a.submitted_as = run_as;
    a.nodes = d.nodes;
    a.submitted_at = now;
    a.state = "PD";
    a.credential = credential;
    allocations_.push_back(a);
    result->pending_reasons[d.job_id] = SlurmWaitReason(a, 0);
  }
  // Stored before anything else can happen to it: a restarted coordinator
  // must find it.
  Persist(*id, result);
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
