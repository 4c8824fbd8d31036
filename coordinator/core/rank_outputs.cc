#include "coordinator/core/rank_outputs.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {

RankOutputs::RankOutputs(Store* store, StoreWriter* writer, ChangeNotifier* changes,
                         int max_points_per_report, Limits limits)
    : store_(store),
      writer_(writer),
      changes_(changes),
      max_points_per_report_(max_points_per_report),
      limits_(limits) {}

absl::Status RankOutputs::LoadTally(int64_t job_id) {
  {
    absl::MutexLock lock(&mu_);
    if (tallies_.contains(job_id)) return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(JobOutputUsage stored, store_->GetJobOutputUsage(job_id));
  absl::MutexLock lock(&mu_);
  Tally tally{
      stored.metric_rows,
      std::set<std::string>(stored.metric_names.begin(), stored.metric_names.end()),
      stored.log_bytes};
  tallies_.emplace(job_id, std::move(tally));  // a racing loader's copy is as good
  return absl::OkStatus();
}

absl::Status RankOutputs::ChargeMetrics(int64_t job_id,
                                        const std::vector<MetricRow>& rows) {
  if (limits_.max_metric_rows <= 0 && limits_.max_metric_names <= 0) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(LoadTally(job_id));
  absl::MutexLock lock(&mu_);
  Tally& tally = tallies_[job_id];
  if (limits_.max_metric_rows > 0 &&
      tally.metric_rows + static_cast<int64_t>(rows.size()) > limits_.max_metric_rows) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, " has stored ", tally.metric_rows,
                     " metric rows; the per-job limit is ", limits_.max_metric_rows,
                     " (--max-metric-rows)"));
  }
  std::set<std::string> names = tally.metric_names;
  for (const MetricRow& row : rows) names.insert(row.name);
  if (limits_.max_metric_names > 0 &&
      static_cast<int64_t>(names.size()) > limits_.max_metric_names) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, " would have ", names.size(),
                     " distinct metric names; the per-job limit is ",
                     limits_.max_metric_names, " (--max-metric-names)"));
  }
  tally.metric_rows += static_cast<int64_t>(rows.size());
  tally.metric_names = std::move(names);
  return absl::OkStatus();
}

void RankOutputs::Forget(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  tallies_.erase(job_id);
}

absl::Status RankOutputs::CheckChunk(const v1::ShipLogsRequest& request) {
  if (request.data().size() > 4 * 1024 * 1024) {
    return absl::InvalidArgumentError("log chunk larger than 4 MiB");
  }
  if (request.offset() < 0) return absl::InvalidArgumentError("negative log offset");
  return absl::OkStatus();
}

absl::StatusOr<v1::ShipLogsResponse> RankOutputs::ShipLog(
    const v1::ShipLogsRequest& request) {
  if (limits_.max_log_bytes > 0) {
    RETURN_IF_ERROR(LoadTally(request.job_id()));
    absl::MutexLock lock(&mu_);
    const int64_t stored = tallies_[request.job_id()].log_bytes;
    if (stored + static_cast<int64_t>(request.data().size()) > limits_.max_log_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", request.job_id(), " has stored ", stored,
                       " log bytes; the per-job limit is ", limits_.max_log_bytes,
                       " (--max-log-bytes)"));
    }
  }
  if (writer_->BelowReserve()) {
    // State before logs: the chunk is shed (counted), and the worker, which
    // keeps the rank's log, moves on; once there is space again a chunk past
    // the stored end makes it send the gap again.
    writer_->CountShedLog(request.job_id(),
                          std::count(request.data().begin(), request.data().end(), '\n'));
    v1::ShipLogsResponse response;
    response.set_next_offset(request.offset() +
                             static_cast<int64_t>(request.data().size()));
    return response;
  }
  LogChunk chunk{request.job_id(), request.attempt(), request.rank(), request.offset(),
                 request.data()};
  ASSIGN_OR_RETURN(const int64_t before,
                   store_->LogEnd(request.job_id(), request.attempt(), request.rank()));
  absl::Status appended = store_->AppendLog(chunk);
  if (!appended.ok() && !absl::IsFailedPrecondition(appended)) return appended;
  ASSIGN_OR_RETURN(int64_t end,
                   store_->LogEnd(request.job_id(), request.attempt(), request.rank()));
  if (request.eof() && appended.ok()) {
    absl::MutexLock lock(&mu_);
    logs_complete_.insert({request.job_id(), request.attempt(), request.rank()});
  }
  if (appended.ok()) changes_->Notify();
  if (end > before) {
    absl::MutexLock lock(&mu_);
    auto it = tallies_.find(request.job_id());
    if (it != tallies_.end()) it->second.log_bytes += end - before;
  }
  v1::ShipLogsResponse response;
  response.set_next_offset(end);
  return response;
}

bool RankOutputs::EofSeen(int64_t job_id, int32_t attempt, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  return logs_complete_.contains({job_id, attempt, rank});
}

absl::StatusOr<v1::GetLogsResponse> RankOutputs::ReadLog(
    const v1::GetLogsRequest& request, std::optional<ActiveLog> active) {
  int32_t attempt = request.attempt();
  bool rank_exited = true;
  if (active) {
    attempt = active->attempt;
    rank_exited = active->rank_exited;
  } else {
    writer_->Flush();  // the job's last state change may still be queued
    absl::StatusOr<JobRecord> record = store_->GetJob(request.job_id());
    if (absl::IsNotFound(record.status())) {
      return absl::NotFoundError(absl::StrCat("job ", request.job_id(), " not found"));
    }
    RETURN_IF_ERROR(record.status());
    if (attempt <= 0) attempt = record->attempt;
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
  const bool eof_seen = EofSeen(request.job_id(), attempt, request.rank());
  response.set_complete(data.empty() && rank_exited && (eof_seen || !active));
  response.set_data(std::move(data));
  return response;
}

absl::StatusOr<std::vector<MetricRow>> RankOutputs::MetricRows(
    const v1::ReportMetricsRequest& request) const {
  if (request.points_size() > max_points_per_report_) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", max_points_per_report_, " points per report"));
  }
  std::vector<MetricRow> rows;
  rows.reserve(request.points_size());
  for (const v1::MetricPoint& p : request.points()) {
    if (p.name().empty() || p.name().size() > 128) {
      return absl::InvalidArgumentError("metric name: must be 1-128 characters");
    }
    rows.push_back(MetricRow{request.job_id(), request.attempt(), request.rank(),
                             p.step(), p.name(), p.value(), p.unix_ms()});
  }
  return rows;
}

void RankOutputs::AppendMetrics(std::vector<MetricRow> rows,
                                std::function<void(absl::Status)> done) {
  writer_->AppendMetrics(std::move(rows),
                         [this, done = std::move(done)](absl::Status status) {
                           if (status.ok()) changes_->Notify();
                           done(std::move(status));
                         });
}

absl::StatusOr<std::vector<v1::MetricPoint>> RankOutputs::GetMetrics(
    const v1::GetMetricsRequest& request, bool job_active) {
  if (!job_active) {
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

}  // namespace tessera
