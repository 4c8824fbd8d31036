#include "coordinator/core/active_job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/trainer_exit.h"
#include "common/worker_fields.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

bool ExitedCleanly(const RankRecord& r) {
  return r.state == RankState::kExited && r.exit_code == 0 && r.signal == 0;
}

bool ExitedPreempted(const RankRecord& r) {
  return r.state == RankState::kExited && r.exit_code == kTrainerExitPreempted &&
         r.signal == 0;
}

// "exited with code 6 (CUDA error): <the rank's exit reason line>".
std::string ExitText(const RankRecord& r, const std::string& detail) {
  if (r.signal != 0) return absl::StrCat("was killed by signal ", r.signal);
  std::string text = absl::StrCat("exited with code ", r.exit_code);
  const std::string_view meaning = TrainerExitMeaning(r.exit_code);
  if (!meaning.empty()) absl::StrAppend(&text, " (", std::string(meaning), ")");
  if (!detail.empty()) absl::StrAppend(&text, ": ", detail);
  return text;
}

}  // namespace

void ActiveJob::StartAttempt(const Placement& placement, absl::Time now) {
  record.attempt += 1;
  ranks.clear();
  for (const RankPlacement& rp : placement.ranks) {
    RankRecord rank;
    rank.job_id = placement.job_id;
    rank.attempt = record.attempt;
    rank.rank = rp.rank;
    rank.worker = rp.worker;
    rank.slot = rp.slot;
    rank.state = RankState::kAssigned;
    ranks.push_back(rank);
  }
  kill_sent.assign(ranks.size(), false);
  watch.reset();
  preempting.clear();
  placed_at = now;
  for (const RankRecord& r : ranks) last_contact[{r.attempt, r.rank}] = now;
}

std::string ActiveJob::PlacementText() const {
  std::string where;
  for (const auto& r : ranks) {
    absl::StrAppend(&where, where.empty() ? "" : ", ", r.rank, "->", r.worker, "/",
                    r.slot);
  }
  return where;
}

RankRecord* ActiveJob::CurrentRank(int32_t attempt, int32_t rank,
                                   const std::string& worker) {
  if (record.attempt != attempt || rank < 0 ||
      rank >= static_cast<int32_t>(ranks.size()) || ranks[rank].worker != worker) {
    return nullptr;
  }
  return &ranks[rank];
}

RankRecord& ActiveJob::RecordExit(const v1::LocalRank& reported) {
  RankRecord& rank = ranks[reported.rank()];
  rank.state = RankState::kExited;
  rank.pid = reported.pid();
  rank.exit_code = reported.exit_code();
  rank.signal = reported.signal();
  rank.exit_reason =
      reported.launch_error().empty()
          ? (ExitedPreempted(rank)
                 ? std::string("checkpointed and left (preempted)")
                 : ExitText(rank, reported.exit_detail().substr(0, kMaxExitDetailBytes)))
          : absl::StrCat("could not be launched: ",
                         reported.launch_error().substr(0, 1024));
  if (kill_sent[reported.rank()])
    absl::StrAppend(&rank.exit_reason, " after a stop order");
  return rank;
}

const RankRecord* ActiveJob::FirstFailedRank() const {
  for (const auto& r : ranks) {
    if (r.state == RankState::kExited && !ExitedCleanly(r) && !ExitedPreempted(r)) {
      return &r;
    }
  }
  return nullptr;
}

const RankRecord* ActiveJob::ResultLostRank() const {
  if (adopted_attempt == 0 || adopted_attempt != record.attempt) return nullptr;
  for (const auto& r : ranks) {
    if (ExitedCleanly(r) && !r.has_result) return &r;
  }
  return nullptr;
}

bool ActiveJob::AllExitedCleanly() const {
  return std::all_of(ranks.begin(), ranks.end(), ExitedCleanly);
}

bool ActiveJob::AllExitedPreempted() const {
  return !ranks.empty() &&
         std::all_of(ranks.begin(), ranks.end(),
                     [](const RankRecord& r) {
                       return ExitedCleanly(r) || ExitedPreempted(r);
                     }) &&
         std::any_of(ranks.begin(), ranks.end(), ExitedPreempted);
}

bool ActiveJob::AllExited() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [](const RankRecord& r) { return r.state == RankState::kExited; });
}

std::vector<int32_t> ActiveJob::LocalRanks() const {
  std::map<std::string, int32_t> next;
  std::vector<int32_t> out;
  out.reserve(ranks.size());
  for (const auto& r : ranks) out.push_back(next[r.worker]++);
  return out;
}

void ActiveJob::AddUsedSlots(std::map<std::string, std::vector<int32_t>>& used) const {
  for (const auto& r : ranks) {
    if (r.state != RankState::kExited) used[r.worker].push_back(r.slot);
  }
  for (const auto& r : previous) used[r.worker].push_back(r.slot);
}

bool ActiveJob::Finished() const {
  return IsTerminal(record.state) && previous.empty() &&
         std::all_of(ranks.begin(), ranks.end(),
                     [](const RankRecord& r) { return r.state == RankState::kExited; });
}

void ActiveJob::LoseRank(const RankRecord& rank, absl::Time now, absl::Time deadline) {
  spdlog::warn(
      "job {} attempt {} rank {} on {} is lost: it may run until its lease runs out, "
      "at most {} from now",
      record.id, rank.attempt, rank.rank, rank.worker,
      absl::FormatDuration(absl::Trunc(deadline - now, absl::Milliseconds(100))));
  lost.push_back(LostRank{rank, now, deadline});
}

bool ActiveJob::ForgetExitedRank(int32_t attempt, int32_t rank,
                                 const std::string& worker) {
  const size_t before = previous.size();
  std::erase_if(previous, [&](const RankRecord& r) {
    return r.attempt == attempt && r.rank == rank && r.worker == worker;
  });
  bool forgot = previous.size() != before;
  const size_t lost_before = lost.size();
  std::erase_if(lost, [&](const LostRank& l) {
    return l.rank.attempt == attempt && l.rank.rank == rank && l.rank.worker == worker;
  });
  if (lost.size() != lost_before) {
    spdlog::info("job {}: lost rank {} of attempt {} on {} has exited", record.id, rank,
                 attempt, worker);
    forgot = true;
  }
  return forgot;
}

bool ActiveJob::ExpireLostRanks(absl::Time now) {
  const size_t before = lost.size();
  std::erase_if(lost, [&](const LostRank& l) {
    if (l.deadline > now) return false;
    spdlog::info(
        "job {}: the lease of lost rank {} of attempt {} on {} has run out; the "
        "rank has stopped itself",
        record.id, l.rank.rank, l.rank.attempt, l.rank.worker);
    return true;
  });
  return lost.size() != before;
}

std::string ActiveJob::HoldReason(absl::Time now) const {
  std::string who;
  int count = 0;
  absl::Time since = absl::InfiniteFuture();
  absl::Time until = now;
  for (const LostRank& l : lost) {
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
  for (const RankRecord& r : previous) {
    absl::StrAppend(&who, who.empty() ? "" : ", ", "rank ", r.rank, " of attempt ",
                    r.attempt, " on ", r.worker);
  }
  if (who.empty()) return "";
  return absl::StrCat("waiting for the failed attempt's ranks to stop (", who, ")");
}

ActiveLog ActiveJob::LogOf(int32_t attempt, int32_t rank) const {
  ActiveLog log{.attempt = attempt > 0 ? attempt : record.attempt};
  if (log.attempt == record.attempt && rank >= 0 &&
      rank < static_cast<int32_t>(ranks.size())) {
    log.rank_exited = ranks[rank].state == RankState::kExited;
  } else if (log.attempt < record.attempt) {
    log.rank_exited = true;
  }
  return log;
}

v1::Job ActiveJob::ToProto(absl::Time now) const {
  v1::Job job = JobToProto(record, ranks);
  AddEvents(events, job);
  if (watch.has_value()) {
    for (v1::RankStatus& s : *job.mutable_ranks()) {
      if (s.state() == RankStateName(RankState::kExited)) continue;
      if (const v1::RankProgress* p = watch->Progress(s.rank()); p != nullptr) {
        *s.mutable_progress() = *p;
        s.set_progress_age_ms(
            absl::ToInt64Milliseconds(now - watch->ReceivedAt(s.rank())));
      }
      s.set_straggler(watch->IsStraggler(s.rank()));
    }
    for (const std::string& text : watch->Stragglers()) job.add_stragglers(text);
  }
  return job;
}

v1::Job JobToProto(const JobRecord& record, const std::vector<RankRecord>& ranks) {
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
  job.set_preemptions(record.preemptions);
  job.set_metrics_not_stored(record.metrics_not_stored);
  job.set_log_lines_not_stored(record.log_lines_not_stored);
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
    // Stored by the coordinator itself (RankSessions::ReportResult).
    if (!r.eval_result.empty()) s->mutable_eval()->ParseFromString(r.eval_result);
  }
  return job;
}

void AddEvents(const std::vector<JobEvent>& events, v1::Job& job) {
  for (const JobEvent& e : events) {
    v1::JobEvent* p = job.add_events();
    p->set_unix_ms(e.unix_ms);
    p->set_from_state(e.from_state);
    p->set_to_state(e.to_state);
    p->set_reason(e.reason);
  }
}

}  // namespace tessera
