#include "coordinator/core/job_lifecycle.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

constexpr RankState kExited = RankState::kExited;

}  // namespace

absl::Status JobLifecycle::AdoptLocked(JobRecord record) {
  const absl::Time now = state_.clock->Now();
  ActiveJob job;
  job.record = std::move(record);
  if (job.record.attempt > 0) {
    ASSIGN_OR_RETURN(job.ranks,
                     state_.store->GetRanks(job.record.id, job.record.attempt));
  }
  // Trainers may have renewed their leases up to the moment the previous
  // coordinator stopped: count their leases from now.
  for (const RankRecord& r : job.ranks) job.last_contact[{r.attempt, r.rank}] = now;
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
  ASSIGN_OR_RETURN(job.events, state_.store->ListEvents(job.record.id));
  if (job.record.state == v1::JOB_STATE_SCHEDULED) {
    state_.rendezvous.Open(job.record.id, job.record.attempt, job.LocalRanks());
    job.placed_at = now;
  }
  if (job.record.state == v1::JOB_STATE_RUNNING) {
    // Silence counts from the adoption: the ranks report again within seconds.
    std::vector<std::string> where;
    for (const RankRecord& r : job.ranks) where.push_back(r.worker);
    job.watch.emplace(std::move(where), now);
  }
  int64_t id = job.record.id;
  state_.jobs.emplace(id, std::move(job));
  return absl::OkStatus();
}

void JobLifecycle::TransitionLocked(ActiveJob& job, v1::JobState to, std::string reason) {
  if (absl::Status legal = CheckTransition(job.record.state, to); !legal.ok()) {
    ++state_.illegal_transitions;
    spdlog::error("job {}: {} ({}): a bug in the coordinator", job.record.id,
                  std::string(legal.message()), reason);
    if (IsTerminal(job.record.state) || to == job.record.state) return;
    // A state nobody designed for is not run on: the job ends, saying why.
    to = v1::JOB_STATE_FAILED;
    reason = absl::StrCat("internal error: ", legal.message(), " (", reason, ")");
  }
  spdlog::info("job {} {} -> {}: {}", job.record.id, JobStateName(job.record.state),
               JobStateName(to), reason);
  const int64_t now = state_.NowMs();
  if (to != job.record.state) {
    job.events.push_back(JobEvent{job.record.id, now, job.record.state, to, reason});
    if (IsTerminal(to)) ++state_.jobs_ended[to];
  }
  job.record.state = to;
  job.record.reason = std::move(reason);
  if (to == v1::JOB_STATE_QUEUED) job.queued_at = state_.clock->Now();
  if (to != v1::JOB_STATE_QUEUED) job.record.pending_reason.clear();
  job.record.updated_unix_ms = now;
  state_.writer->UpdateJob(job.record);
  if (IsTerminal(to)) NoteShedLocked(job);
  state_.changes.Notify();
}

void JobLifecycle::RecordEventLocked(ActiveJob& job, const std::string& text) {
  const int64_t now = state_.NowMs();
  job.events.push_back(
      JobEvent{job.record.id, now, job.record.state, job.record.state, text});
  job.record.updated_unix_ms = now;
  JobRecord update = job.record;
  update.event = text;
  state_.writer->UpdateJob(std::move(update));
  state_.changes.Notify();
}

void JobLifecycle::EvaluateLocked(ActiveJob& job, RendezvousRounds::Releases* releases) {
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
    state_.rendezvous.Close(job.record.id, job.record.attempt, absl::OkStatus());
    TransitionLocked(job, v1::JOB_STATE_SUCCEEDED,
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

void JobLifecycle::FailAttemptLocked(ActiveJob& job, const std::string& reason,
                                     RendezvousRounds::Releases* releases,
                                     bool preempted) {
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    if (job.ranks[r].state != kExited) job.kill_sent[r] = true;
  }
  auto closed = state_.rendezvous.Close(job.record.id, job.record.attempt,
                                        absl::AbortedError(reason));
  for (auto& c : closed) releases->push_back(std::move(c));
  const int32_t restarts_used = job.record.attempt - 1 - job.record.preemptions;
  if (!preempted && restarts_used >= job.record.spec.max_restarts()) {
    TransitionLocked(job, v1::JOB_STATE_FAILED, reason);
    return;
  }
  // The survivors keep their slots until they are gone; the next attempt is
  // placed once the slots are free.
  for (auto& r : job.ranks) {
    if (r.state != kExited) job.previous.push_back(r);
  }
  job.ranks.clear();
  job.kill_sent.clear();
  const std::string hold =
      job.lost.empty() ? "" : absl::StrCat("; ", job.HoldReason(state_.clock->Now()));
  if (preempted) {
    job.record.preemptions += 1;
    TransitionLocked(job, v1::JOB_STATE_QUEUED,
                     absl::StrCat("attempt ", job.record.attempt, " ", reason,
                                  "; requeued (preemption ", job.record.preemptions,
                                  ", not counted as a restart)", hold));
    return;
  }
  TransitionLocked(job, v1::JOB_STATE_QUEUED,
                   absl::StrCat("attempt ", job.record.attempt, " failed: ", reason,
                                "; restarting (restart ", restarts_used + 1, " of ",
                                job.record.spec.max_restarts(), ")", hold));
}

void JobLifecycle::LoseRankLocked(ActiveJob& job, const RankRecord& rank) {
  const JobManagerOptions& options = state_.options;
  const absl::Time now = state_.clock->Now();
  auto contact = job.last_contact.find({rank.attempt, rank.rank});
  const absl::Time from = contact != job.last_contact.end() ? contact->second : now;
  // Before its first renewal a trainer counts the first contact lease, so
  // the longer of the two bounds how long it may run unrenewed.
  const absl::Duration lease =
      std::max(options.trainer_lease, options.trainer_first_contact_lease);
  job.LoseRank(rank, now,
               from + lease * (1 + options.trainer_lease_margin_ratio) +
                   options.trainer_lease_margin);
}

void JobLifecycle::LoseWorkerRanksLocked(const std::string& worker,
                                         const std::string& why,
                                         RendezvousRounds::Releases* releases) {
  for (auto& [id, job] : state_.jobs) {
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
      state_.writer->PutRanks({r});
      lost = true;
    }
    if (lost) EvaluateLocked(job, releases);
  }
}

bool JobLifecycle::ExpireLostRanksLocked(absl::Time now) {
  bool changed = false;
  for (auto& [id, job] : state_.jobs) changed |= job.ExpireLostRanks(now);
  return changed;
}

void JobLifecycle::ReapLocked() {
  std::optional<std::set<int64_t>> unstored;  // asked for once, when needed
  for (auto it = state_.jobs.begin(); it != state_.jobs.end();) {
    if (!it->second.Finished()) {
      ++it;
      continue;
    }
    if (!unstored) unstored = state_.writer->UnstoredJobs();
    if (unstored->contains(it->first)) {
      state_.unstored[it->first] = it->second.ToProto(state_.clock->Now());
    }
    state_.outputs.Forget(it->first);
    state_.figures.Forget(it->first);
    it = state_.jobs.erase(it);
  }
}

bool JobLifecycle::WatchRunningLocked(absl::Time now,
                                      RendezvousRounds::Releases* releases) {
  bool changed = false;
  for (auto& [id, job] : state_.jobs) {
    if (job.record.state != v1::JOB_STATE_RUNNING || !job.watch.has_value()) continue;
    const RankWatchOptions options =
        RankWatchFor(state_.options.watchdog, job.record.spec.watchdog());
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

void JobLifecycle::SyncWithStoreLocked() {
  for (auto& [id, job] : state_.jobs) NoteShedLocked(job);
  if (!state_.unstored.empty()) {
    const std::set<int64_t> kept = state_.writer->UnstoredJobs();
    std::erase_if(state_.unstored,
                  [&](const auto& entry) { return !kept.contains(entry.first); });
  }
}

void JobLifecycle::NoteShedLocked(ActiveJob& job) {
  const StoreWriter::Shed shed = state_.writer->TakeShed(job.record.id);
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

}  // namespace tessera
