#include "coordinator/core/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device_figures.h"
#include "common/metric_names.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

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
  bool accuracy_from_eval = false;  // an eval job's top-1 (EvalTopOnes)
  bool has_time = false;
  // Each reporting rank's newest figure; empty when no rank reported it.
  std::vector<double> optimizer_state_bytes;
  std::vector<double> gradient_bytes;
  std::vector<double> parameter_bytes;
  // The highest measured peak of any rank (AddMeasuredPeak); unset when no
  // rank reported one.
  std::optional<double> peak_memory_bytes;
  std::string memory_source;  // kMemorySourceCuda or kMemorySourceRss
};

// SweepReportRow.memory_source: which measured figure a peak comes from.
constexpr char kMemorySourceCuda[] = "cuda";
constexpr char kMemorySourceRss[] = "rss";

// Point job -> the top-1 of its newest eval job that succeeded (tessctl eval
// JOB records JOB as spec.eval_of). Eval jobs are submitted after the jobs
// they evaluate, so the newest-first pages end at the sweep's first point.
absl::StatusOr<std::map<int64_t, double>> EvalTopOnes(const v1::Sweep& sweep,
                                                      JobRequests& jobs) {
  std::set<int64_t> points;
  for (const v1::SweepPoint& p : sweep.points()) {
    if (p.job_id() != 0) points.insert(p.job_id());
  }
  std::map<int64_t, double> top1;
  if (points.empty()) return top1;
  JobFilter filter;
  filter.state = v1::JOB_STATE_SUCCEEDED;
  filter.limit = 1000;
  while (true) {
    ASSIGN_OR_RETURN(const JobList page, jobs.ListJobs(Caller::Admin(), filter));
    for (const v1::Job& listed : page.jobs) {
      if (listed.id() <= *points.begin()) return top1;
      const int64_t of = listed.spec().eval_of();
      if (listed.spec().kind() != "eval" || !points.contains(of) || top1.contains(of)) {
        continue;  // newest first: the first one found is kept
      }
      // Lists carry no ranks' results; the job itself does.
      ASSIGN_OR_RETURN(const v1::Job job, jobs.GetJob(Caller::Admin(), listed.id()));
      if (job.ranks_size() > 0 && job.ranks(0).has_eval()) {
        top1[of] = job.ranks(0).eval().top1();
      }
    }
    if (page.next_before_id == 0) return top1;
    filter.before_id = page.next_before_id;
  }
}

// The points that share one row: (world size, batch size, scaling, shape,
// ZeRO stage).
using RowKey = std::tuple<int32_t, int32_t, std::string, std::string, int32_t>;
struct RowRuns {
  RowKey key;
  std::vector<int64_t> job_ids;  // every submitted point's job
  std::vector<RunFigures> runs;  // succeeded runs with a measured time
};

// The named metric of the job's current attempt, in (step, rank) order. Only
// a metric kSweepReportMetricNames lists: database retention keeps those, so
// that a report of old jobs has the rows it had.
absl::StatusOr<std::vector<v1::MetricPoint>> AttemptMetric(JobRequests& jobs,
                                                           const v1::Job& job,
                                                           const std::string& name) {
  if (std::find(std::begin(kSweepReportMetricNames), std::end(kSweepReportMetricNames),
                name) == std::end(kSweepReportMetricNames)) {
    return absl::InternalError(absl::StrCat(
        "the sweep report reads '", name,
        "', which kSweepReportMetricNames (common/metric_names.h) does not list"));
  }
  v1::GetMetricsRequest q;
  q.set_job_id(job.id());
  q.set_name(name);
  q.set_limit(100000);
  ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points,
                   jobs.GetMetrics(Caller::Admin(), q));
  std::vector<v1::MetricPoint> out;
  for (auto& p : points) {
    if (p.attempt() == job.attempt()) out.push_back(std::move(p));
  }
  return out;
}

// The named metric's values from rank 0, in step order.
absl::StatusOr<std::vector<double>> Rank0Values(JobRequests& jobs, const v1::Job& job,
                                                const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points, AttemptMetric(jobs, job, name));
  std::vector<double> values;
  for (const auto& p : points) {
    if (p.rank() == 0) values.push_back(p.value());
  }
  return values;
}

// The named metric's newest value of each rank that reported it, in rank
// order (a figure every rank reports once, such as its optimizer state bytes).
absl::StatusOr<std::vector<double>> PerRankValues(JobRequests& jobs, const v1::Job& job,
                                                  const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points, AttemptMetric(jobs, job, name));
  std::map<int32_t, double> newest;  // points come in (step, rank) order
  for (const auto& p : points) newest[p.rank()] = p.value();
  std::vector<double> values;
  for (const auto& [rank, value] : newest) values.push_back(value);
  return values;
}

// The highest value of a peak figure that any rank reported in the job's
// attempt: each rank's peak is the largest it reported (the figures only grow,
// so that is its newest), the job's the largest over its ranks.
absl::StatusOr<std::optional<double>> MaxOverRanks(JobRequests& jobs, const v1::Job& job,
                                                   const std::string& name) {
  ASSIGN_OR_RETURN(const std::vector<v1::MetricPoint> points,
                   AttemptMetric(jobs, job, name));
  std::optional<double> peak;
  for (const auto& p : points) peak = std::max(peak.value_or(p.value()), p.value());
  return peak;
}

// Sets the run's measured peak memory per rank: the CUDA caching allocator's
// peak where ranks ran on GPUs (their host RSS is not what the device held),
// else the CPU ranks' peak RSS.
absl::Status AddMeasuredPeak(JobRequests& jobs, const v1::Job& job, RunFigures& f) {
  ASSIGN_OR_RETURN(const std::optional<double> cuda,
                   MaxOverRanks(jobs, job, kCudaPeakAllocatedFigure));
  if (cuda.has_value()) {
    f.peak_memory_bytes = cuda;
    f.memory_source = kMemorySourceCuda;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::optional<double> rss,
                   MaxOverRanks(jobs, job, kPeakRssFigure));
  if (rss.has_value()) {
    f.peak_memory_bytes = rss;
    f.memory_source = kMemorySourceRss;
  }
  return absl::OkStatus();
}

// Sets the run's training time and epoch time: the mean measured epoch time,
// else one derived from the training time and steps.
absl::Status AddTimes(JobRequests& jobs, const v1::Job& job, RunFigures& f) {
  ASSIGN_OR_RETURN(const std::vector<double> epochs,
                   Rank0Values(jobs, job, kEpochSecondsMetricName));
  ASSIGN_OR_RETURN(const std::vector<double> train,
                   Rank0Values(jobs, job, kTrainSecondsMetricName));
  ASSIGN_OR_RETURN(const std::vector<double> steps,
                   Rank0Values(jobs, job, kTrainStepsMetricName));
  ASSIGN_OR_RETURN(const std::vector<double> per_epoch,
                   Rank0Values(jobs, job, kStepsPerEpochMetricName));
  if (!train.empty()) f.train_seconds = train.back();
  if (!epochs.empty()) {
    f.epoch_seconds = Mean(epochs);
    f.has_time = true;
  } else if (!train.empty() && !steps.empty() && !per_epoch.empty() && steps.back() > 0) {
    f.epoch_seconds = train.back() * per_epoch.back() / steps.back();
    f.has_time = true;
  }
  return absl::OkStatus();
}

// The share of step time spent communicating, averaged over (step, rank).
absl::StatusOr<double> CommShare(JobRequests& jobs, const v1::Job& job) {
  ASSIGN_OR_RETURN(auto comm, AttemptMetric(jobs, job, kCommTimeMsMetricName));
  ASSIGN_OR_RETURN(auto step_ms, AttemptMetric(jobs, job, kStepTimeMsFigure));
  std::map<std::pair<int64_t, int32_t>, double> step_time;
  for (const auto& p : step_ms) step_time[{p.step(), p.rank()}] = p.value();
  std::vector<double> shares;
  for (const auto& p : comm) {
    auto it = step_time.find({p.step(), p.rank()});
    if (it != step_time.end() && it->second > 0) shares.push_back(p.value() / it->second);
  }
  return Mean(shares);
}

absl::StatusOr<RunFigures> FiguresOf(JobRequests& jobs, int64_t job_id,
                                     const std::map<int64_t, double>& eval_top1) {
  ASSIGN_OR_RETURN(v1::Job job, jobs.GetJob(Caller::Admin(), job_id));
  RunFigures f;
  RETURN_IF_ERROR(AddTimes(jobs, job, f));
  ASSIGN_OR_RETURN(f.comm_share, CommShare(jobs, job));
  ASSIGN_OR_RETURN(auto ips, AttemptMetric(jobs, job, kImagesPerSecFigure));
  std::vector<double> ips_values;
  for (const auto& p : ips) ips_values.push_back(p.value());
  f.images_per_sec = Mean(ips_values) * std::max(1, job.spec().world_size());
  ASSIGN_OR_RETURN(const std::vector<double> acc,
                   Rank0Values(jobs, job, kTestAccuracyMetricName));
  if (!acc.empty()) f.accuracy = acc.back();
  if (const auto it = eval_top1.find(job_id); it != eval_top1.end()) {
    f.accuracy = it->second;
    f.accuracy_from_eval = true;
  }
  ASSIGN_OR_RETURN(f.optimizer_state_bytes,
                   PerRankValues(jobs, job, kOptimizerStateBytesMetricName));
  ASSIGN_OR_RETURN(f.gradient_bytes, PerRankValues(jobs, job, kGradientBytesMetricName));
  ASSIGN_OR_RETURN(f.parameter_bytes,
                   PerRankValues(jobs, job, kParameterBytesMetricName));
  RETURN_IF_ERROR(AddMeasuredPeak(jobs, job, f));
  return f;
}

// The sweep's points grouped into rows, in grid order, with the figures of
// each row's succeeded runs.
absl::StatusOr<std::vector<RowRuns>> GroupPoints(const v1::Sweep& sweep,
                                                 JobRequests& jobs) {
  ASSIGN_OR_RETURN(const auto eval_top1, EvalTopOnes(sweep, jobs));
  std::vector<RowRuns> rows;
  std::map<RowKey, size_t> index;
  for (const v1::SweepPoint& p : sweep.points()) {
    RowKey key{p.world_size(), p.batch_size(), p.scaling(), p.shape(), p.zero_stage()};
    auto [it, added] = index.try_emplace(key, rows.size());
    if (added) rows.push_back(RowRuns{.key = key});
    RowRuns& row = rows[it->second];
    if (p.job_id() == 0) continue;
    row.job_ids.push_back(p.job_id());
    if (p.state() != v1::JOB_STATE_SUCCEEDED) continue;
    ASSIGN_OR_RETURN(RunFigures f, FiguresOf(jobs, p.job_id(), eval_top1));
    if (f.has_time) row.runs.push_back(f);
  }
  return rows;
}

// The row's measured peak: the highest of its runs' (a rank needs the most
// that any run needed), from GPU runs where there are any.
void SetMeasuredPeak(const std::vector<RunFigures>& runs, v1::SweepReportRow& row) {
  for (const char* source : {kMemorySourceCuda, kMemorySourceRss}) {
    std::optional<double> peak;
    for (const RunFigures& f : runs) {
      if (!f.peak_memory_bytes.has_value() || f.memory_source != source) continue;
      peak = std::max(peak.value_or(*f.peak_memory_bytes), *f.peak_memory_bytes);
    }
    if (peak.has_value()) {
      row.set_peak_memory_bytes_per_rank(*peak);
      row.set_memory_source(source);
      return;
    }
  }
}

void FillRow(const RowRuns& runs, v1::SweepReportRow& row) {
  row.set_world_size(std::get<0>(runs.key));
  row.set_batch_size(std::get<1>(runs.key));
  row.set_scaling(std::get<2>(runs.key));
  row.set_shape(std::get<3>(runs.key));
  row.set_zero_stage(std::get<4>(runs.key));
  for (int64_t id : runs.job_ids) row.add_job_ids(id);
  row.set_runs(static_cast<int32_t>(runs.runs.size()));
  if (runs.runs.empty()) return;
  std::vector<double> epoch, total, ips, comm, acc, optimizer_bytes, gradient_bytes,
      parameter_bytes;
  for (const RunFigures& f : runs.runs) {
    optimizer_bytes.insert(optimizer_bytes.end(), f.optimizer_state_bytes.begin(),
                           f.optimizer_state_bytes.end());
    gradient_bytes.insert(gradient_bytes.end(), f.gradient_bytes.begin(),
                          f.gradient_bytes.end());
    parameter_bytes.insert(parameter_bytes.end(), f.parameter_bytes.begin(),
                           f.parameter_bytes.end());
    epoch.push_back(f.epoch_seconds);
    total.push_back(f.train_seconds);
    ips.push_back(f.images_per_sec);
    comm.push_back(f.comm_share);
    acc.push_back(f.accuracy);
    if (f.accuracy_from_eval) row.set_eval_runs(row.eval_runs() + 1);
  }
  row.set_epoch_time_mean_s(Mean(epoch));
  row.set_epoch_time_std_s(StdDev(epoch));
  row.set_total_time_mean_s(Mean(total));
  row.set_images_per_sec(Mean(ips));
  row.set_comm_share(Mean(comm));
  row.set_final_accuracy(Mean(acc));
  // Left unset without figures: "not reported" is not zero bytes.
  if (!optimizer_bytes.empty())
    row.set_optimizer_state_bytes_per_rank(Mean(optimizer_bytes));
  if (!gradient_bytes.empty()) row.set_gradient_bytes_per_rank(Mean(gradient_bytes));
  if (!parameter_bytes.empty()) row.set_parameter_bytes_per_rank(Mean(parameter_bytes));
  SetMeasuredPeak(runs.runs, row);
}

// Speedup and efficiency against the smallest measured world size of the same
// batch size, scaling, shape kind (pack, spread, or fixed NxM shapes) and ZeRO
// stage.
void SetSpeedups(v1::SweepReport& report) {
  auto shape_kind = [](const std::string& shape) {
    return shape == "pack" || shape == "spread" ? shape : std::string("NxM");
  };
  for (v1::SweepReportRow& row : *report.mutable_rows()) {
    if (row.runs() == 0 || row.epoch_time_mean_s() <= 0) continue;
    const v1::SweepReportRow* base = nullptr;
    for (const v1::SweepReportRow& other : report.rows()) {
      if (other.runs() == 0 || other.epoch_time_mean_s() <= 0 ||
          other.batch_size() != row.batch_size() || other.scaling() != row.scaling() ||
          shape_kind(other.shape()) != shape_kind(row.shape()) ||
          other.zero_stage() != row.zero_stage()) {
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
}

}  // namespace

absl::StatusOr<v1::SweepReport> BuildSweepReport(const v1::Sweep& sweep,
                                                 JobRequests& jobs) {
  ASSIGN_OR_RETURN(const std::vector<RowRuns> rows, GroupPoints(sweep, jobs));
  v1::SweepReport report;
  report.set_sweep_id(sweep.id());
  for (const RowRuns& runs : rows) FillRow(runs, *report.add_rows());
  SetSpeedups(report);
  return report;
}

}  // namespace tessera
