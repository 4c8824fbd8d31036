#include "coordinator/core/worker_sessions.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
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

// What the coordinator believes about a reported rank: `rank` is the current
// rank it names on the reporting worker, or nullptr when there is none.
RankBelief BeliefOf(const RankRecord* rank) {
  if (rank == nullptr) return RankBelief{};
  return RankBelief{.current = true, .state = rank->state, .pid = rank->pid};
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

}  // namespace

absl::StatusOr<v1::RegisterWorkerResponse> WorkerSessions::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  v1::RegisterWorkerResponse response;
  RendezvousRounds::Releases releases;
  {
    absl::MutexLock lock(&state_.mu);
    ASSIGN_OR_RETURN(response, state_.workers.Register(request));
    if (SlurmPoolManager* slurm = state_.slurm.load();
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
    if (changed) lifecycle_.ReapLocked();
    placer_.ScheduleLocked();
  }
  state_.changes.Notify();
  RunReleases(releases);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> WorkerSessions::Heartbeat(
    const v1::HeartbeatRequest& request) {
  ScopedLatency latency(state_.heartbeat_latency);
  v1::HeartbeatResponse response;
  RendezvousRounds::Releases releases;
  std::vector<RankRecord> exits;  // recorded by this heartbeat
  {
    absl::MutexLock lock(&state_.mu);
    // An exit in this report can end a placement, and a reaped job is no
    // longer charged: its time up to now is charged first, at the load it had.
    if (std::any_of(request.ranks().begin(), request.ranks().end(),
                    [](const v1::LocalRank& r) { return r.exited(); })) {
      quotas_.AccrueUsageLocked();
    }
    ASSIGN_OR_RETURN(const HeartbeatReport report, state_.workers.Heartbeat(request));
    if (request.draining() && !state_.workers.Draining(request.name())) {
      // SIGTERM or a preemption notice: the worker asks its ranks to leave.
      RETURN_IF_ERROR(state_.workers.Drain(
          request.name(), "worker stopping",
          state_.clock->Now() + state_.options.drain_timeout, /*self=*/true));
    }
    bool changed = ReconcileReportedRanksLocked(report, response, &releases, &exits);
    changed |= ReconcileUnlistedRanksLocked(report);
    changed |= LoseUnlistedRanksLocked(report, &releases);
    AddOrdersLocked(report, response);
    if (changed) {
      lifecycle_.ReapLocked();
      placer_.ScheduleLocked();
    }
  }
  // The worker's last heartbeat time (and maybe its ranks) changed.
  state_.changes.Notify();
  RunReleases(releases);
  if (!exits.empty()) AcknowledgeOnceStored(request.name(), exits, response);
  return response;
}

void WorkerSessions::AcknowledgeOnceStored(const std::string& worker,
                                           const std::vector<RankRecord>& exits,
                                           v1::HeartbeatResponse& response) {
  // An exit is acknowledged (and then forgotten by the worker) only once it
  // is durable: a coordinator that crashes before the write hears it again.
  // The records are written once more with a completion: the writer applies
  // writes in order and keeps failed state writes for retry, so its success
  // means these rows are committed.
  auto stored = std::make_shared<absl::Notification>();
  auto ok = std::make_shared<std::atomic<bool>>(false);
  state_.writer->PutRanks(exits, [stored, ok](absl::Status status) {
    ok->store(status.ok());
    stored->Notify();
  });
  // Bounded well inside the dead threshold: while the store fails, this
  // worker's next heartbeat waits for this one, and a worker must never look
  // dead for waiting on the store (its exits are acknowledged later).
  const absl::Duration wait =
      std::min(state_.options.exit_ack_timeout, state_.options.worker_dead_after / 4);
  if (!stored->WaitForNotificationWithTimeout(wait) || !ok->load()) {
    spdlog::warn(
        "the exits worker {} reported are not stored yet; acknowledging them later",
        worker);
    response.clear_acknowledged_exits();
  }
}

absl::StatusOr<v1::ShipLogsResponse> WorkerSessions::ShipLogs(
    const v1::ShipLogsRequest& request) {
  RETURN_IF_ERROR(RankOutputs::CheckChunk(request));
  ASSIGN_OR_RETURN(const bool placed_here, PlacedHere(request));
  if (!placed_here) {
    return absl::PermissionDeniedError(
        absl::StrCat("rank ", request.rank(), " of job ", request.job_id(), " attempt ",
                     request.attempt(), " was not assigned to worker ", request.name()));
  }
  return state_.outputs.ShipLog(request);
}

absl::StatusOr<bool> WorkerSessions::PlacedHere(const v1::ShipLogsRequest& request) {
  {
    absl::MutexLock lock(&state_.mu);
    RETURN_IF_ERROR(state_.workers.CheckSession(request.name(), request.epoch()));
    auto it = state_.jobs.find(request.job_id());
    if (it != state_.jobs.end() &&
        PlacedOn(it->second, request.attempt(), request.rank(), request.name())) {
      return true;
    }
  }
  // An ended job, or an earlier attempt already forgotten: the store has
  // every attempt's placement (its last writes may still be queued).
  state_.writer->Flush();
  absl::StatusOr<std::vector<RankRecord>> ranks =
      state_.store->GetRanks(request.job_id(), request.attempt());
  if (!ranks.ok() && !absl::IsNotFound(ranks.status())) return ranks.status();
  return ranks.ok() &&
         std::any_of(ranks->begin(), ranks->end(), [&](const RankRecord& r) {
           return r.rank == request.rank() && r.worker == request.name();
         });
}

bool WorkerSessions::WorkerLive(const std::string& name) {
  absl::MutexLock lock(&state_.mu);
  return state_.workers.Live(name);
}

std::vector<v1::Worker> WorkerSessions::ListWorkers(const Caller& caller) {
  absl::MutexLock lock(&state_.mu);
  std::vector<v1::Worker> workers = state_.workers.List(state_.UsedSlotsLocked());
  // Slots held by jobs the caller may not see: a count, no job or owner.
  std::map<std::string, std::vector<int32_t>> others;
  for (const auto& [id, job] : state_.jobs) {
    if (!caller.MaySee(job.record.owner)) job.AddUsedSlots(others);
  }
  for (v1::Worker& w : workers) {
    auto it = others.find(w.name());
    w.set_slots_used_by_others(
        it == others.end() ? 0 : static_cast<int32_t>(it->second.size()));
  }
  return workers;
}

absl::StatusOr<v1::Worker> WorkerSessions::DrainWorker(const Caller& caller,
                                                       const std::string& name,
                                                       absl::Duration timeout,
                                                       bool undrain) {
  if (!caller.admin) {
    return absl::PermissionDeniedError(
        "draining a worker takes an admin token (tessctl token create NAME --admin)");
  }
  v1::Worker out;
  {
    absl::MutexLock lock(&state_.mu);
    if (undrain) {
      RETURN_IF_ERROR(state_.workers.Undrain(name));
      placer_.ScheduleLocked();
    } else {
      const absl::Duration wait =
          timeout > absl::ZeroDuration() ? timeout : state_.options.drain_timeout;
      RETURN_IF_ERROR(state_.workers.Drain(
          name, absl::StrCat("drain by ", caller.name.empty() ? "an admin" : caller.name),
          state_.clock->Now() + wait));
    }
    for (v1::Worker& w : state_.workers.List(state_.UsedSlotsLocked())) {
      if (w.name() == name) out = std::move(w);
    }
  }
  state_.changes.Notify();
  return out;
}

bool WorkerSessions::DeclareSilentWorkersDeadLocked(
    RendezvousRounds::Releases* releases) {
  const std::vector<std::string> silent = state_.workers.Silent();
  for (const std::string& name : silent) {
    // The worker's session is fenced: when it comes back it must register
    // again, and then stops every rank that is no longer current.
    const std::string why = state_.workers.DeclareDead(name);
    lifecycle_.LoseWorkerRanksLocked(name, why, releases);
  }
  return !silent.empty();
}

bool WorkerSessions::EnforceDrainsLocked(absl::Time now,
                                         RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (const std::string& name : state_.workers.DrainingWorkers()) {
    const absl::Time deadline = state_.workers.DrainDeadline(name);
    for (auto& [id, job] : state_.jobs) {
      if (IsTerminal(job.record.state)) continue;
      bool here = false;
      bool unstarted = false;
      for (const RankRecord& r : job.ranks) {
        if (r.worker != name || r.state == kExited) continue;
        here = true;
        unstarted |= r.state == kAssigned;
      }
      if (!here || (now < deadline && !unstarted)) continue;
      const std::string cause = job.preempting.empty()
                                    ? absl::StrCat("preempted on ", name, " (",
                                                   state_.workers.DrainReason(name), ")")
                                    : job.preempting;
      lifecycle_.FailAttemptLocked(
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

bool WorkerSessions::ReconcileReportedRanksLocked(const HeartbeatReport& report,
                                                  v1::HeartbeatResponse& response,
                                                  RendezvousRounds::Releases* releases,
                                                  std::vector<RankRecord>* recorded) {
  bool changed = false;
  // One rank at a time: an exit may end the attempt, which makes the ranks
  // reported after it no longer current.
  for (const v1::LocalRank& lr : report.ranks()) {
    auto it = state_.jobs.find(lr.job_id());
    ActiveJob* job = it == state_.jobs.end() ? nullptr : &it->second;
    RankRecord* rank = job == nullptr
                           ? nullptr
                           : job->CurrentRank(lr.attempt(), lr.rank(), report.worker());
    switch (report.Reconcile(lr, BeliefOf(rank))) {
      case RankVerdict::kNone:
        break;
      case RankVerdict::kRecordRunning:
        rank->state = kRunning;
        rank->pid = lr.pid();
        state_.writer->PutRanks({*rank});
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

void WorkerSessions::RecordExitLocked(ActiveJob& job, const v1::LocalRank& reported,
                                      RendezvousRounds::Releases* releases,
                                      std::vector<RankRecord>* recorded) {
  const RankRecord& rank = job.RecordExit(reported);
  state_.writer->PutRanks({rank});
  if (recorded != nullptr) recorded->push_back(rank);
  spdlog::info("job {} attempt {} rank {} {}", job.record.id, job.record.attempt,
               rank.rank, rank.exit_reason);
  // May end the attempt, which clears job.ranks: `rank` is not used after this.
  lifecycle_.EvaluateLocked(job, releases);
}

bool WorkerSessions::ReconcileUnlistedRanksLocked(const HeartbeatReport& report) {
  bool changed = false;
  for (auto& [job_id, job] : state_.jobs) {
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

bool WorkerSessions::LoseUnlistedRanksLocked(const HeartbeatReport& report,
                                             RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (auto& [id, job] : state_.jobs) {
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
      state_.writer->PutRanks({r});
      lost = true;
    }
    if (lost) {
      lifecycle_.EvaluateLocked(job, releases);
      changed = true;
    }
  }
  return changed;
}

void WorkerSessions::AddOrdersLocked(const HeartbeatReport& report,
                                     v1::HeartbeatResponse& response) {
  const bool draining = state_.workers.Draining(report.worker());
  for (auto& [id, job] : state_.jobs) {
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
                                        state_.workers.DrainReason(report.worker()), ")");
          spdlog::info("job {} attempt {}: {}; its ranks checkpoint and leave", id,
                       job.record.attempt, job.preempting);
        }
        *response.add_preempt() = KillOrderFor(id, job.record.attempt, rank.rank);
      } else if (rank.state == kAssigned && !IsTerminal(job.record.state) && !draining &&
                 !report.ListsRank(id, rank.rank)) {
        // The trainer's lease may count from any launch order sent.
        job.last_contact[{job.record.attempt, rank.rank}] = state_.clock->Now();
        *response.add_launch() = LaunchOrderFor(job.record, job.ranks, r, local_ranks[r]);
      }
    }
  }
}

}  // namespace tessera
