#include "coordinator/store/db_retention.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// Keeps the first error of a pass while its other jobs go on.
void Keep(absl::Status status, absl::Status& first) {
  if (status.ok()) return;
  spdlog::warn("database retention: {}", status.ToString());
  if (first.ok()) first = std::move(status);
}

}  // namespace

DbRetention::DbRetention(Store* store, const Clock* clock, Options options)
    : store_(store), clock_(clock), options_(std::move(options)) {}

DbRetention::~DbRetention() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

bool DbRetention::enabled() const {
  return options_.retain_metrics != absl::InfiniteDuration() ||
         options_.retain_logs != absl::InfiniteDuration() || options_.max_size_bytes > 0;
}

void DbRetention::Start() {
  thread_ = std::thread([this] { Loop(); });
}

DbRetention::Totals DbRetention::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

void DbRetention::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(options_.interval)) {
    absl::StatusOr<Pass> pass = RunOnce();
    if (!pass.ok()) continue;  // logged per job
    if (pass->rows_deleted > 0) {
      spdlog::info(
          "database retention: {} job(s) downsampled ({} metric rows), {} job(s) logs "
          "dropped by age, {} job(s) thinned ({} metric rows) and {} pruned ({} metric "
          "rows) for --db-max-size; {} -> {} bytes in use",
          pass->jobs_downsampled, pass->metric_rows_downsampled, pass->jobs_logs_dropped,
          pass->jobs_thinned, pass->metric_rows_thinned, pass->jobs_pruned,
          pass->metric_rows_pruned, pass->used_bytes_before, pass->used_bytes_after);
    }
  }
}

absl::Status DbRetention::ApplyAge(const FinishedJobOutputs& job, Pass& pass) {
  const absl::Duration age = clock_->Now() - absl::FromUnixMillis(job.ended_unix_ms);
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  absl::Status first;
  if (!job.logs_dropped && age >= options_.retain_logs) {
    absl::StatusOr<int64_t> rows = store_->DropLogs(
        job.job_id,
        {now_ms, absl::StrCat("logs dropped ", FormatRetentionAge(options_.retain_logs),
                              " after the job ended (--retain-logs); the rank logs "
                              "stay on the workers")});
    if (rows.ok()) {
      ++pass.jobs_logs_dropped;
      pass.log_chunks_dropped += *rows;
      pass.rows_deleted += *rows;
    }
    Keep(rows.status(), first);
  }
  if (!job.metrics_downsampled && !job.metrics_dropped &&
      age >= options_.retain_metrics) {
    absl::StatusOr<int64_t> rows = store_->DownsampleMetrics(
        job.job_id, options_.max_points_per_series,
        {now_ms,
         absl::StrCat("metrics downsampled to at most ", options_.max_points_per_series,
                      " points per series ", FormatRetentionAge(options_.retain_metrics),
                      " after the job ended (--retain-metrics); every "
                      "evaluation point kept")});
    if (rows.ok()) {
      ++pass.jobs_downsampled;
      pass.metric_rows_downsampled += *rows;
      pass.rows_deleted += *rows;
    }
    Keep(rows.status(), first);
  }
  return first;
}

absl::Status DbRetention::ThinJob(const FinishedJobOutputs& job, Pass& pass) {
  absl::StatusOr<int64_t> rows = store_->ThinMetrics(
      job.job_id,
      {absl::ToUnixMillis(clock_->Now()),
       absl::StrCat("metrics thinned: the database was over its --db-max-size of ",
                    options_.max_size_bytes,
                    " bytes; each series keeps its last point, and the evaluation "
                    "metrics and those reports read are kept whole")});
  if (!rows.ok()) return rows.status();
  ++pass.jobs_thinned;
  pass.metric_rows_thinned += *rows;
  pass.rows_deleted += *rows;
  return absl::OkStatus();
}

absl::Status DbRetention::PruneJob(const FinishedJobOutputs& job, Pass& pass) {
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  // Both, whatever the earlier steps left: a drop of what is gone removes
  // nothing.
  absl::StatusOr<int64_t> metrics = store_->DropMetrics(
      job.job_id,
      {now_ms, absl::StrCat("metrics and logs dropped: the database was still over "
                            "its --db-max-size of ",
                            options_.max_size_bytes,
                            " bytes with every finished job thinned, and this was the "
                            "oldest; the evaluation metrics and those reports read "
                            "are kept")});
  absl::StatusOr<int64_t> logs = store_->DropLogs(job.job_id, {now_ms, ""});
  if (metrics.ok() && logs.ok()) {
    ++pass.jobs_pruned;
    pass.metric_rows_pruned += *metrics;
    pass.log_chunks_dropped += *logs;
    pass.rows_deleted += *metrics + *logs;
  }
  if (!metrics.ok()) return metrics.status();
  return logs.status();
}

absl::Status DbRetention::CutToBudget(const std::vector<FinishedJobOutputs>& jobs,
                                      SizeCut cut, Pass& pass) {
  ASSIGN_OR_RETURN(StoreSize size, store_->GetStoreSize());
  absl::Status first;
  for (const FinishedJobOutputs& job : jobs) {
    if (size.used_bytes() <= options_.max_size_bytes || stop_.HasBeenNotified()) break;
    if (cut == SizeCut::kThin) {
      if (job.metrics_thinned || job.metrics_dropped) continue;
      Keep(ThinJob(job, pass), first);
    } else {
      Keep(PruneJob(job, pass), first);
    }
    ASSIGN_OR_RETURN(size, store_->GetStoreSize());
  }
  return first;
}

absl::Status DbRetention::NoteBudget(Pass& pass) {
  ASSIGN_OR_RETURN(const StoreSize size, store_->GetStoreSize());
  pass.bytes_over_budget =
      std::max<int64_t>(0, size.used_bytes() - options_.max_size_bytes);
  pass.over_budget = pass.bytes_over_budget > 0;
  if (pass.over_budget && !stop_.HasBeenNotified()) {
    spdlog::warn(
        "database retention: {} bytes in use, {} over --db-max-size ({}): every "
        "finished job's logs and metrics are dropped but the kept ones (evaluation "
        "results and what sweep and search reports read), and the rest is job records "
        "and running jobs' outputs; raise --db-max-size",
        size.used_bytes(), pass.bytes_over_budget, options_.max_size_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<DbRetention::Pass> DbRetention::RunOnce() {
  Pass pass;
  ASSIGN_OR_RETURN(StoreSize before, store_->GetStoreSize());
  pass.used_bytes_before = before.used_bytes();
  ASSIGN_OR_RETURN(std::vector<FinishedJobOutputs> jobs,
                   store_->ListFinishedJobOutputs());
  absl::Status first;
  for (const FinishedJobOutputs& job : jobs) {
    if (stop_.HasBeenNotified()) break;
    Keep(ApplyAge(job, pass), first);
  }
  if (options_.max_size_bytes > 0 && !stop_.HasBeenNotified()) {
    Keep(CutToBudget(jobs, SizeCut::kThin, pass), first);
    Keep(CutToBudget(jobs, SizeCut::kDrop, pass), first);
    Keep(NoteBudget(pass), first);
  }
  if (pass.rows_deleted > 0) Keep(store_->ReclaimSpace(), first);
  {
    absl::MutexLock lock(&mu_);
    totals_.bytes_over_budget = pass.bytes_over_budget;
    totals_.metric_rows_downsampled += pass.metric_rows_downsampled;
    totals_.metric_rows_thinned += pass.metric_rows_thinned;
    totals_.metric_rows_pruned += pass.metric_rows_pruned;
    totals_.log_chunks_dropped += pass.log_chunks_dropped;
  }
  ASSIGN_OR_RETURN(StoreSize after, store_->GetStoreSize());
  pass.used_bytes_after = after.used_bytes();
  pass.file_bytes_after = after.file_bytes;
  if (!first.ok()) return first;
  return pass;
}

absl::StatusOr<absl::Duration> ParseRetentionAge(const std::string& text,
                                                 const std::string& flag) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "0" || lower == "off" || lower == "never") {
    return absl::InfiniteDuration();
  }
  absl::Duration unit;
  switch (lower.empty() ? '\0' : lower.back()) {
    case 's':
      unit = absl::Seconds(1);
      break;
    case 'm':
      unit = absl::Minutes(1);
      break;
    case 'h':
      unit = absl::Hours(1);
      break;
    case 'd':
      unit = absl::Hours(24);
      break;
    case 'w':
      unit = absl::Hours(24 * 7);
      break;
    default:
      unit = absl::ZeroDuration();
  }
  int64_t count = 0;
  if (unit == absl::ZeroDuration() ||
      !absl::SimpleAtoi(lower.substr(0, lower.size() - 1), &count) || count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", text,
                     "' is not an age (e.g. 90d, 2w, 12h, 30m, 3600s; 0 or never: keep "
                     "forever)"));
  }
  return unit * count;
}

std::string FormatRetentionAge(absl::Duration age) {
  if (age == absl::InfiniteDuration()) return "never";
  const int64_t seconds = absl::ToInt64Seconds(age);
  if (seconds > 0 && seconds % 86400 == 0) return absl::StrCat(seconds / 86400, "d");
  if (seconds > 0 && seconds % 3600 == 0) return absl::StrCat(seconds / 3600, "h");
  if (seconds > 0 && seconds % 60 == 0) return absl::StrCat(seconds / 60, "m");
  return absl::StrCat(seconds, "s");
}

}  // namespace tessera
