#include "coordinator/core/rank_sessions.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// An eval job's result: per-class figures and at most 100 x 100 confusion
// counts (worker/trainer/run/eval_report.h) fit easily; it is kept in the ranks row.
constexpr size_t kMaxEvalResultBytes = 4 << 20;

absl::Status NotActive(int64_t job_id) {
  return absl::NotFoundError(absl::StrCat("job ", job_id, " is not active"));
}

v1::RendezvousResponse ResponseOf(const RendezvousResult& result) {
  v1::RendezvousResponse response;
  response.set_rank(result.rank);
  response.set_local_rank(result.local_rank);
  response.set_world_size(result.world_size);
  response.set_attempt(result.attempt);
  response.set_bootstrap(result.bootstrap);
  response.set_backend(result.backend);
  return response;
}

// Reports are shown to users and kept per rank: whether a progress report is
// within bounds (phases that exist, names of sane length).
bool Bounded(const v1::RankProgress& p) {
  bool bounded = p.phase().size() <= 32 && p.collective().size() <= 128 &&
                 p.phase_ms_size() <= 16 && p.device_phase_ms_size() <= 16;
  for (const auto& [phase, ms] : p.phase_ms()) bounded &= phase.size() <= 32;
  for (const auto& [phase, ms] : p.device_phase_ms()) bounded &= phase.size() <= 32;
  return bounded;
}

}  // namespace

void RankSessions::Rendezvous(
    const v1::RendezvousRequest& request,
    std::function<void(absl::StatusOr<v1::RendezvousResponse>)> done) {
  if (request.bootstrap().size() > 4096) {
    done(absl::InvalidArgumentError("bootstrap: larger than 4096 bytes"));
    return;
  }
  RendezvousRounds::Releases releases;
  absl::Status status;
  {
    absl::MutexLock lock(&state_.mu);
    auto it = state_.jobs.find(request.job_id());
    if (it == state_.jobs.end()) {
      status = NotActive(request.job_id());
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
        done(ResponseOf(*result));
      };
      bool completed = false;
      status = state_.rendezvous.Join(request.job_id(), request.attempt(), request.rank(),
                                      request.bootstrap(), request.backend(), callback,
                                      &releases, &completed);
      if (status.ok() && completed) {
        ActiveJob& job = it->second;
        std::vector<std::string> where;
        for (const RankRecord& r : job.ranks) where.push_back(r.worker);
        job.watch.emplace(std::move(where), state_.clock->Now());
        state_.rendezvous_latency.Observe(state_.clock->Now() - job.placed_at);
        lifecycle_.TransitionLocked(
            job, v1::JOB_STATE_RUNNING,
            absl::StrCat("all ", job.ranks.size(), " ranks joined"));
      }
    }
  }
  RunReleases(releases);
  if (!status.ok()) done(status);
}

absl::StatusOr<absl::Duration> RankSessions::RenewLease(
    const v1::RenewLeaseRequest& request) {
  absl::MutexLock lock(&state_.mu);
  auto it = state_.jobs.find(request.job_id());
  if (it == state_.jobs.end()) return NotActive(request.job_id());
  ActiveJob& job = it->second;
  if (job.record.attempt != request.attempt() || request.rank() < 0 ||
      request.rank() >= static_cast<int32_t>(job.ranks.size())) {
    return absl::AbortedError(absl::StrCat("attempt ", request.attempt(), " rank ",
                                           request.rank(), " of job ", request.job_id(),
                                           " is no longer current"));
  }
  const RankRecord& rank = job.ranks[request.rank()];
  if (rank.state == RankState::kExited) {
    // Counted as gone (e.g. its worker was declared dead): it must not go on.
    return absl::AbortedError(absl::StrCat("rank ", rank.rank, " of job ", job.record.id,
                                           " counts as exited: ", rank.exit_reason));
  }
  job.last_contact[{request.attempt(), request.rank()}] = state_.clock->Now();
  if (job.watch.has_value() && request.has_progress()) {
    // A malformed report is dropped; the renewal still counts.
    if (Bounded(request.progress())) {
      job.watch->Report(request.rank(), request.progress(), state_.clock->Now());
    } else {
      spdlog::warn("job {} rank {}: malformed progress report dropped", job.record.id,
                   request.rank());
    }
  }
  return state_.options.trainer_lease;
}

void RankSessions::ReportMetrics(const v1::ReportMetricsRequest& request,
                                 std::function<void(absl::Status)> done) {
  absl::StatusOr<std::vector<MetricRow>> rows = state_.outputs.MetricRows(request);
  if (!rows.ok()) {
    RefuseMetrics(request.points_size(), rows.status(), done);
    return;
  }
  if (absl::Status charged = state_.outputs.ChargeMetrics(request.job_id(), *rows);
      !charged.ok()) {
    RefuseMetrics(rows->size(), charged, done);
    return;
  }
  absl::MutexLock lock(&state_.mu);
  auto it = state_.jobs.find(request.job_id());
  absl::Status refused;
  if (it == state_.jobs.end()) {
    refused = NotActive(request.job_id());
  } else if (it->second.record.attempt != request.attempt()) {
    // A credential of an earlier attempt is still valid; its data is not.
    refused =
        absl::AbortedError(absl::StrCat("attempt ", request.attempt(), " is stale"));
  } else if (request.rank() < 0 ||
             request.rank() >= static_cast<int32_t>(it->second.ranks.size())) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank(), " is outside the job"));
  }
  if (!refused.ok()) {
    RefuseMetrics(rows->size(), refused, done);
    return;
  }
  state_.figures.Record(*rows);
  // Enqueued under the lock so the rows are ordered with the job's state changes.
  const int64_t count = static_cast<int64_t>(rows->size());
  ClusterState* const state = &state_;
  state_.outputs.AppendMetrics(
      *std::move(rows), [state, count, done = std::move(done)](absl::Status stored) {
        (stored.ok() ? state->metric_rows_written : state->metric_rows_refused)
            .fetch_add(count);
        done(std::move(stored));
      });
}

void RankSessions::RefuseMetrics(size_t rows, const absl::Status& status,
                                 const std::function<void(absl::Status)>& done) {
  state_.metric_rows_refused.fetch_add(static_cast<int64_t>(rows));
  done(status);
}

absl::Status RankSessions::ReportResult(const v1::ReportResultRequest& request) {
  if (request.param_hash().size() > 128) {
    return absl::InvalidArgumentError("param_hash: longer than 128 characters");
  }
  if (request.eval().ByteSizeLong() > kMaxEvalResultBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval: ", request.eval().ByteSizeLong(), " bytes, limit ", kMaxEvalResultBytes));
  }
  absl::MutexLock lock(&state_.mu);
  auto it = state_.jobs.find(request.job_id());
  if (it == state_.jobs.end()) return NotActive(request.job_id());
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
  state_.writer->PutRanks({rank});
  state_.changes.Notify();
  return absl::OkStatus();
}

bool RankSessions::FailTimedOutRendezvousLocked(absl::Time now,
                                                RendezvousRounds::Releases* releases) {
  const absl::Duration timeout = state_.options.rendezvous_timeout;
  bool changed = false;
  for (auto& [id, job] : state_.jobs) {
    if (job.record.state != v1::JOB_STATE_SCHEDULED || now - job.placed_at <= timeout) {
      continue;
    }
    std::optional<std::vector<int32_t>> missing =
        state_.rendezvous.Missing(id, job.record.attempt);
    std::string who;
    for (int32_t r : missing.value_or(std::vector<int32_t>{})) {
      absl::StrAppend(&who, who.empty() ? "" : ", ", r, " (on ", job.ranks[r].worker,
                      ")");
    }
    lifecycle_.FailAttemptLocked(
        job,
        absl::StrCat("rendezvous timed out after ", absl::FormatDuration(timeout),
                     ": rank(s) ", who.empty() ? "?" : who, " never joined"),
        releases);
    changed = true;
  }
  return changed;
}

void RankSessions::CloseAll() {
  RendezvousRounds::Releases releases;
  {
    absl::MutexLock lock(&state_.mu);
    releases = state_.rendezvous.CloseAll(
        absl::UnavailableError("coordinator is shutting down"));
  }
  RunReleases(releases);
}

}  // namespace tessera
