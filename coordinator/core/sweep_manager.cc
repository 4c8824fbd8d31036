#include "coordinator/core/sweep_manager.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "common/sweep_spec.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

std::string PointRequestId(int64_t sweep_id, int32_t point) {
  return absl::StrCat("sweep:", sweep_id, ":point:", point);
}

// A sweep's own errors keep the store's codes, except that a store that cannot
// take writes is reported as retryable.
absl::Status Retryable(const absl::Status& s, absl::string_view what) {
  if (absl::IsResourceExhausted(s) || absl::IsInternal(s) || absl::IsDataLoss(s)) {
    return absl::UnavailableError(absl::StrCat(what, ", try again: ", s.message()));
  }
  return s;
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// Sample standard deviation; 0 for fewer than two values.
double StdDev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  return std::sqrt(sq / static_cast<double>(v.size() - 1));
}

// Figures of one finished run (one job), from its final attempt's metrics.
struct RunFigures {
  double epoch_seconds = 0;
  double train_seconds = 0;
  double images_per_sec = 0;  // all ranks together
  double comm_share = 0;
  double accuracy = 0;
  bool has_time = false;
};

}  // namespace

SweepManager::SweepManager(Store* store, JobManager* jobs, const Clock* clock,
                           SpecLimits limits)
    : store_(store), jobs_(jobs), clock_(clock), limits_(limits) {}

absl::Status SweepManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<SweepRecord> sweeps, store_->ListSweeps());
  absl::MutexLock lock(&mu_);
  for (const SweepRecord& s : sweeps) {
    if (s.state == v1::SWEEP_STATE_RUNNING) running_.insert(s.id);
  }
  if (!running_.empty()) spdlog::info("{} sweeps still running", running_.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::SubmitSweepResponse> SweepManager::Submit(
    const v1::SweepSpec& spec, const std::string& spec_yaml,
    const std::string& client_request_id, const std::string& owner) {
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(spec, limits_));
  if (client_request_id.size() > 128) {
    return absl::InvalidArgumentError("client_request_id: longer than 128 characters");
  }
  if (spec_yaml.size() > 64 * 1024) {
    return absl::InvalidArgumentError("spec_yaml: larger than 64 KiB");
  }
  SweepRecord record;
  record.name = spec.name();
  record.state = v1::SWEEP_STATE_RUNNING;
  record.reason = "submitted";
  record.spec = spec;
  record.spec_yaml = spec_yaml;
  record.client_request_id = client_request_id;
  record.owner = owner;
  record.created_unix_ms = absl::ToUnixMillis(clock_->Now());
  record.updated_unix_ms = record.created_unix_ms;
  absl::StatusOr<int64_t> created = store_->CreateSweep(record);
  if (!created.ok()) return Retryable(created.status(), "sweep not stored");
  record.id = *created;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(SweepRecord stored, store_->GetSweep(record.id));
    if (stored.state == v1::SWEEP_STATE_RUNNING) {
      if (running_.insert(stored.id).second) {
        spdlog::info("sweep {} ({}) submitted: {} points, {} at a time", stored.id,
                     stored.name, points.size(), std::max(1, spec.max_parallel()));
      }
      absl::Status advanced = AdvanceLocked(stored);
      // The sweep is stored; the monitor retries the points it could not submit.
      if (!advanced.ok()) spdlog::warn("sweep {}: {}", stored.id, advanced.ToString());
    }
  }
  jobs_->changes().Notify();
  v1::SubmitSweepResponse response;
  response.set_sweep_id(record.id);
  response.set_points(static_cast<int32_t>(points.size()));
  return response;
}

absl::StatusOr<std::vector<const v1::Job*>> SweepManager::PointJobs(
    const SweepRecord& sweep, size_t points, std::vector<v1::Job>& storage) {
  JobFilter filter;
  filter.sweep_id = sweep.id;
  ASSIGN_OR_RETURN(storage, jobs_->ListJobs(filter));
  std::vector<const v1::Job*> by_point(points, nullptr);
  for (const v1::Job& job : storage) {
    const int32_t p = job.sweep_point();
    // Jobs are listed newest first; the first seen for a point is the one kept.
    if (p >= 0 && static_cast<size_t>(p) < points && by_point[p] == nullptr) {
      by_point[p] = &job;
    }
  }
  return by_point;
}

absl::Status SweepManager::AdvanceLocked(SweepRecord& sweep) {
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(sweep.spec, limits_));
  std::vector<v1::Job> storage;
  ASSIGN_OR_RETURN(std::vector<const v1::Job*> jobs,
                   PointJobs(sweep, points.size(), storage));
  const int max_parallel = std::max(1, sweep.spec.max_parallel());
  int active = 0;
  for (const v1::Job* job : jobs) {
    if (job != nullptr && !IsTerminal(job->state())) ++active;
  }
  for (size_t i = 0; i < points.size() && active < max_parallel; ++i) {
    if (jobs[i] != nullptr) continue;
    JobOrigin origin;
    origin.sweep_id = sweep.id;
    origin.sweep_point = static_cast<int32_t>(i);
    origin.owner = sweep.owner;
    ASSIGN_OR_RETURN(const int64_t job_id,
                     jobs_->Submit(points[i].job, /*spec_yaml=*/"",
                                   PointRequestId(sweep.id, origin.sweep_point), origin));
    spdlog::info("sweep {} point {} submitted as job {}", sweep.id, i, job_id);
    ++active;
    // Re-read so that the point counts as submitted below.
    storage.clear();
    ASSIGN_OR_RETURN(jobs, PointJobs(sweep, points.size(), storage));
  }
  int ended = 0;
  int succeeded = 0;
  for (const v1::Job* job : jobs) {
    if (job == nullptr || !IsTerminal(job->state())) continue;
    ++ended;
    if (job->state() == v1::JOB_STATE_SUCCEEDED) ++succeeded;
  }
  if (ended < static_cast<int>(points.size())) return absl::OkStatus();
  const int total = static_cast<int>(points.size());
  sweep.state = succeeded == total ? v1::SWEEP_STATE_SUCCEEDED : v1::SWEEP_STATE_FAILED;
  sweep.reason = succeeded == total ? absl::StrCat("all ", total, " points succeeded")
                                    : absl::StrCat(total - succeeded, " of ", total,
                                                   " points did not succeed");
  sweep.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  RETURN_IF_ERROR(store_->UpdateSweep(sweep));
  running_.erase(sweep.id);
  spdlog::info("sweep {} ended: {}", sweep.id, sweep.reason);
  jobs_->changes().Notify();
  return absl::OkStatus();
}

void SweepManager::Tick() {
  absl::MutexLock lock(&mu_);
  const std::set<int64_t> running = running_;
  for (int64_t id : running) {
    absl::StatusOr<SweepRecord> sweep = store_->GetSweep(id);
    absl::Status status = sweep.status();
    if (sweep.ok()) {
      if (sweep->state != v1::SWEEP_STATE_RUNNING) {
        running_.erase(id);
        continue;
      }
      status = AdvanceLocked(*sweep);
    }
    if (!status.ok()) {
      // Retried on the next tick; a store that is full recovers by itself.
      spdlog::warn("sweep {}: cannot advance: {}", id, status.ToString());
    }
  }
}

absl::StatusOr<v1::SweepState> SweepManager::Cancel(int64_t sweep_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(SweepRecord sweep, store_->GetSweep(sweep_id));
  if (sweep.state != v1::SWEEP_STATE_RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sweep ", sweep_id, " has already ended: ", v1::SweepState_Name(sweep.state)));
  }
  sweep.state = v1::SWEEP_STATE_CANCELLED;
  sweep.reason = "cancelled by user";
  sweep.updated_unix_ms = absl::ToUnixMillis(clock_->Now());
  // Stored first, so that a crash in between never submits more points.
  absl::Status updated = store_->UpdateSweep(sweep);
  if (!updated.ok()) return Retryable(updated, "sweep not cancelled");
  running_.erase(sweep_id);
  JobFilter filter;
  filter.sweep_id = sweep_id;
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, jobs_->ListJobs(filter));
  for (const v1::Job& job : jobs) {
    if (IsTerminal(job.state())) continue;
    absl::StatusOr<v1::JobState> cancelled = jobs_->CancelJob(job.id());
    // A point that ended meanwhile is fine.
    if (!cancelled.ok() && !absl::IsFailedPrecondition(cancelled.status())) {
      spdlog::warn("sweep {}: cancelling job {}: {}", sweep_id, job.id(),
                   cancelled.status().ToString());
    }
  }
  spdlog::info("sweep {} cancelled", sweep_id);
  jobs_->changes().Notify();
  return sweep.state;
}

v1::Sweep SweepManager::ToProto(const SweepRecord& sweep) {
  v1::Sweep out;
  out.set_id(sweep.id);
  out.set_name(sweep.name);
  out.set_state(sweep.state);
  out.set_reason(sweep.reason);
  *out.mutable_spec() = sweep.spec;
  out.set_spec_yaml(sweep.spec_yaml);
  out.set_created_unix_ms(sweep.created_unix_ms);
  out.set_updated_unix_ms(sweep.updated_unix_ms);
  return out;
}

absl::StatusOr<v1::Sweep> SweepManager::Get(int64_t sweep_id) {
  ASSIGN_OR_RETURN(SweepRecord sweep, store_->GetSweep(sweep_id));
  v1::Sweep out = ToProto(sweep);
  ASSIGN_OR_RETURN(std::vector<SweepJob> points, ExpandSweep(sweep.spec, limits_));
  std::vector<v1::Job> storage;
  ASSIGN_OR_RETURN(std::vector<const v1::Job*> jobs,
                   PointJobs(sweep, points.size(), storage));
  for (size_t i = 0; i < points.size(); ++i) {
    v1::SweepPoint* p = out.add_points();
    *p = points[i].point;
    if (jobs[i] != nullptr) {
      p->set_job_id(jobs[i]->id());
      p->set_state(jobs[i]->state());
    }
  }
  return out;
}

absl::StatusOr<std::vector<v1::Sweep>> SweepManager::List() {
  ASSIGN_OR_RETURN(std::vector<SweepRecord> sweeps, store_->ListSweeps());
  std::vector<v1::Sweep> out;
  out.reserve(sweeps.size());
  for (const SweepRecord& s : sweeps) {
    absl::StatusOr<v1::Sweep> full = Get(s.id);
    out.push_back(full.ok() ? *std::move(full) : ToProto(s));
  }
  return out;
}

absl::StatusOr<v1::SweepReport> SweepManager::Report(int64_t sweep_id) {
  ASSIGN_OR_RETURN(v1::Sweep sweep, Get(sweep_id));

  // The named metric of one job's given attempt, in (step, rank) order.
  auto metric =
      [this](const v1::Job& job,
             const std::string& name) -> absl::StatusOr<std::vector<v1::MetricPoint>> {
    v1::GetMetricsRequest q;
    q.set_job_id(job.id());
    q.set_name(name);
    q.set_limit(100000);
    ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points, jobs_->GetMetrics(q));
    std::vector<v1::MetricPoint> out;
    for (auto& p : points) {
      if (p.attempt() == job.attempt()) out.push_back(std::move(p));
    }
    return out;
  };
  auto rank0 = [](const std::vector<v1::MetricPoint>& points) {
    std::vector<double> values;
    for (const auto& p : points) {
      if (p.rank() == 0) values.push_back(p.value());
    }
    return values;
  };

  auto figures = [&](int64_t job_id) -> absl::StatusOr<RunFigures> {
    ASSIGN_OR_RETURN(v1::Job job, jobs_->GetJob(job_id));
    RunFigures f;
    ASSIGN_OR_RETURN(auto epochs, metric(job, "epoch_seconds"));
    ASSIGN_OR_RETURN(auto train, metric(job, "train_seconds"));
    ASSIGN_OR_RETURN(auto steps, metric(job, "train_steps"));
    ASSIGN_OR_RETURN(auto per_epoch, metric(job, "steps_per_epoch"));
    const std::vector<double> epoch_values = rank0(epochs);
    const std::vector<double> train_values = rank0(train);
    const std::vector<double> step_values = rank0(steps);
    const std::vector<double> per_epoch_values = rank0(per_epoch);
    if (!train_values.empty()) f.train_seconds = train_values.back();
    if (!epoch_values.empty()) {
      f.epoch_seconds = Mean(epoch_values);
      f.has_time = true;
    } else if (!train_values.empty() && !step_values.empty() &&
               !per_epoch_values.empty() && step_values.back() > 0) {
      f.epoch_seconds =
          train_values.back() * per_epoch_values.back() / step_values.back();
      f.has_time = true;
    }
    ASSIGN_OR_RETURN(auto comm, metric(job, "time_comm_ms"));
    ASSIGN_OR_RETURN(auto step_ms, metric(job, "time_step_ms"));
    std::map<std::pair<int64_t, int32_t>, double> step_time;
    for (const auto& p : step_ms) step_time[{p.step(), p.rank()}] = p.value();
    std::vector<double> shares;
    for (const auto& p : comm) {
      auto it = step_time.find({p.step(), p.rank()});
      if (it != step_time.end() && it->second > 0)
        shares.push_back(p.value() / it->second);
    }
    f.comm_share = Mean(shares);
    ASSIGN_OR_RETURN(auto ips, metric(job, "images_per_sec"));
    std::vector<double> ips_values;
    for (const auto& p : ips) ips_values.push_back(p.value());
    f.images_per_sec = Mean(ips_values) * std::max(1, job.spec().world_size());
    ASSIGN_OR_RETURN(auto acc, metric(job, "test_accuracy"));
    const std::vector<double> acc_values = rank0(acc);
    if (!acc_values.empty()) f.accuracy = acc_values.back();
    return f;
  };

  // Rows in grid order, one per (world size, batch, scaling, shape).
  using Key = std::tuple<int32_t, int32_t, std::string, std::string>;
  std::vector<Key> order;
  std::map<Key, std::vector<int64_t>> jobs_by_key;
  std::map<Key, std::vector<RunFigures>> runs_by_key;
  for (const v1::SweepPoint& p : sweep.points()) {
    Key key{p.world_size(), p.batch_size(), p.scaling(), p.shape()};
    if (!jobs_by_key.contains(key)) order.push_back(key);
    auto& ids = jobs_by_key[key];
    if (p.job_id() == 0) continue;
    ids.push_back(p.job_id());
    if (p.state() != v1::JOB_STATE_SUCCEEDED) continue;
    ASSIGN_OR_RETURN(RunFigures f, figures(p.job_id()));
    if (f.has_time) runs_by_key[key].push_back(f);
  }

  v1::SweepReport report;
  report.set_sweep_id(sweep_id);
  for (const Key& key : order) {
    v1::SweepReportRow* row = report.add_rows();
    row->set_world_size(std::get<0>(key));
    row->set_batch_size(std::get<1>(key));
    row->set_scaling(std::get<2>(key));
    row->set_shape(std::get<3>(key));
    for (int64_t id : jobs_by_key[key]) row->add_job_ids(id);
    const std::vector<RunFigures>& runs = runs_by_key[key];
    row->set_runs(static_cast<int32_t>(runs.size()));
    if (runs.empty()) continue;
    std::vector<double> epoch, total, ips, comm, acc;
    for (const RunFigures& f : runs) {
      epoch.push_back(f.epoch_seconds);
      total.push_back(f.train_seconds);
      ips.push_back(f.images_per_sec);
      comm.push_back(f.comm_share);
      acc.push_back(f.accuracy);
    }
    row->set_epoch_time_mean_s(Mean(epoch));
    row->set_epoch_time_std_s(StdDev(epoch));
    row->set_total_time_mean_s(Mean(total));
    row->set_images_per_sec(Mean(ips));
    row->set_comm_share(Mean(comm));
    row->set_final_accuracy(Mean(acc));
  }

  // Speedup and efficiency against the smallest measured world size of the same
  // batch size, scaling and shape kind (pack, spread, or fixed NxM shapes).
  auto shape_kind = [](const std::string& shape) {
    return shape == "pack" || shape == "spread" ? shape : std::string("NxM");
  };
  for (v1::SweepReportRow& row : *report.mutable_rows()) {
    if (row.runs() == 0 || row.epoch_time_mean_s() <= 0) continue;
    const v1::SweepReportRow* base = nullptr;
    for (const v1::SweepReportRow& other : report.rows()) {
      if (other.runs() == 0 || other.epoch_time_mean_s() <= 0 ||
          other.batch_size() != row.batch_size() || other.scaling() != row.scaling() ||
          shape_kind(other.shape()) != shape_kind(row.shape())) {
        continue;
      }
      if (base == nullptr || other.world_size() < base->world_size()) base = &other;
    }
    if (base == nullptr) continue;
    const double n = static_cast<double>(row.world_size()) / base->world_size();
    const double ratio = base->epoch_time_mean_s() / row.epoch_time_mean_s();
    const double speedup = row.scaling() == "weak" ? n * ratio : ratio;
    row.set_baseline_world_size(base->world_size());
    row.set_speedup(speedup);
    row.set_efficiency(speedup / n);
  }
  return report;
}

}  // namespace tessera
