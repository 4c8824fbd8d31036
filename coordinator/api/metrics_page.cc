#include "coordinator/api/metrics_page.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device_figures.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/text_serializer.h"

namespace tessera {
namespace {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

// A rank's figure as /metrics shows it: its family's name and help, and the
// factor from the reported unit to the family's base unit.
struct RankFigureFamily {
  std::string_view figure;
  const char* name;
  const char* help;
  double scale;
};

constexpr RankFigureFamily kRankFigureFamilies[] = {
    {kCudaAllocatedFigure, "tessera_rank_cuda_allocated_bytes",
     "Memory the rank's CUDA caching allocator has allocated.", 1},
    {kCudaPeakAllocatedFigure, "tessera_rank_cuda_peak_allocated_bytes",
     "Peak memory the rank's CUDA caching allocator has allocated.", 1},
    {kCudaReservedFigure, "tessera_rank_cuda_reserved_bytes",
     "Memory the rank's CUDA caching allocator holds reserved from the device.", 1},
    {kGpuUtilizationFigure, "tessera_rank_gpu_utilization_ratio",
     "Utilisation of the rank's GPU as NVML reports it (0-1).", 0.01},
    {kGpuMemoryUsedFigure, "tessera_rank_gpu_memory_used_bytes",
     "Memory in use on the rank's GPU (every process), as NVML reports it.", 1},
    {kPeakRssFigure, "tessera_rank_peak_rss_bytes",
     "Peak resident memory of a CPU rank's process (VmHWM).", 1},
};

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// Adds a sample to a gauge or counter family.
void Add(MetricFamily& family, const Labels& labels, double value) {
  ClientMetric m;
  for (const auto& [name, label_value] : labels) m.label.push_back({name, label_value});
  if (family.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family.metric.push_back(std::move(m));
}

MetricFamily Histogram(std::string name, std::string help,
                       const LatencyHistogram::Snapshot& s) {
  MetricFamily f = Family(std::move(name), std::move(help), MetricType::Histogram);
  ClientMetric m;
  m.histogram.sample_count = s.count;
  m.histogram.sample_sum = s.sum_seconds;
  for (size_t i = 0; i < s.bounds_seconds.size(); ++i) {
    m.histogram.bucket.push_back({s.cumulative[i], s.bounds_seconds[i]});
  }
  // The serializer writes the +Inf bucket from the last one given.
  m.histogram.bucket.push_back({s.count, std::numeric_limits<double>::infinity()});
  f.metric.push_back(std::move(m));
  return f;
}

void AddJobFamilies(const ClusterMetrics& m, std::vector<MetricFamily>& out) {
  MetricFamily jobs = Family("tessera_jobs", "Active jobs by state.", MetricType::Gauge);
  for (const auto& [state, n] : m.jobs_by_state) Add(jobs, {{"state", state}}, n);
  out.push_back(std::move(jobs));
  MetricFamily ended =
      Family("tessera_jobs_ended_total",
             "Jobs that ended since the coordinator started, by final state.",
             MetricType::Counter);
  for (const auto& [state, n] : m.jobs_ended) Add(ended, {{"state", state}}, n);
  out.push_back(std::move(ended));
  auto queued = m.jobs_by_state.find("queued");
  MetricFamily length =
      Family("tessera_queue_length", "Jobs waiting for slots.", MetricType::Gauge);
  Add(length, {}, queued == m.jobs_by_state.end() ? 0 : queued->second);
  out.push_back(std::move(length));
  MetricFamily oldest =
      Family("tessera_queue_oldest_wait_seconds",
             "How long the oldest queued job has waited (0: none).", MetricType::Gauge);
  Add(oldest, {}, m.oldest_queued_seconds);
  out.push_back(std::move(oldest));
}

void AddSearchFamily(const ClusterMetrics& m, std::vector<MetricFamily>& out) {
  MetricFamily trials =
      Family("tessera_search_trials",
             "Trials of the running searches by state: running, paused (its rung "
             "done, not promoted yet), completed, failed.",
             MetricType::Gauge);
  for (const auto& [state, n] : m.search_trials) Add(trials, {{"state", state}}, n);
  out.push_back(std::move(trials));
}

void AddWorkerFamilies(const ClusterMetrics& m, std::vector<MetricFamily>& out) {
  MetricFamily workers =
      Family("tessera_workers",
             "Workers by state: alive, suspect (silent), dead (declared dead), "
             "draining, drained.",
             MetricType::Gauge);
  for (const auto& [state, n] : m.workers_by_state) Add(workers, {{"state", state}}, n);
  out.push_back(std::move(workers));
  MetricFamily capacity = Family(
      "tessera_slots_capacity",
      "Slots of the workers not declared dead, by kind (cpu, gpu).", MetricType::Gauge);
  MetricFamily slots =
      Family("tessera_slots", "Slots by kind (cpu, gpu) and state (used, free).",
             MetricType::Gauge);
  for (const auto& [kind, s] : m.slots) {
    Add(capacity, {{"kind", kind}}, s.total);
    Add(slots, {{"kind", kind}, {"state", "used"}}, s.used);
    Add(slots, {{"kind", kind}, {"state", "free"}},
        std::max<int64_t>(0, s.total - s.used));
  }
  out.push_back(std::move(capacity));
  out.push_back(std::move(slots));
}

// Each worker's GPUs as NVML reported them with its latest heartbeat.
void AddWorkerGpuFamilies(const ClusterMetrics& m, const MetricsPageOptions& options,
                          std::vector<MetricFamily>& out) {
  MetricFamily util = Family("tessera_worker_gpu_utilization_ratio",
                             "Utilisation of a worker's GPU as NVML reports it (0-1).",
                             MetricType::Gauge);
  MetricFamily used =
      Family("tessera_worker_gpu_memory_used_bytes",
             "Memory in use on a worker's GPU (every process).", MetricType::Gauge);
  MetricFamily total = Family("tessera_worker_gpu_memory_total_bytes",
                              "Memory of a worker's GPU.", MetricType::Gauge);
  MetricFamily temp = Family("tessera_worker_gpu_temperature_celsius",
                             "Temperature of a worker's GPU.", MetricType::Gauge);
  MetricFamily power = Family("tessera_worker_gpu_power_watts",
                              "Power drawn by a worker's GPU.", MetricType::Gauge);
  for (const auto& [worker, gpus] : m.worker_gpus) {
    for (const GpuReading& g : gpus) {
      const Labels labels = {
          {"worker", BoundedLabelValue(worker, options.max_label_bytes)},
          {"gpu", BoundedLabelValue(g.id, options.max_label_bytes)}};
      if (g.utilization_percent) Add(util, labels, *g.utilization_percent / 100);
      if (g.memory_used_bytes) Add(used, labels, *g.memory_used_bytes);
      if (g.memory_total_bytes) Add(total, labels, *g.memory_total_bytes);
      if (g.temperature_celsius) Add(temp, labels, *g.temperature_celsius);
      if (g.power_watts) Add(power, labels, *g.power_watts);
    }
  }
  for (MetricFamily* f : {&util, &used, &total, &temp, &power}) {
    out.push_back(std::move(*f));
  }
}

// The mean of `figure` over the ranks that reported it; false when none did.
bool MeanOf(const LiveFigures::RankFigures& figures, std::string_view figure,
            double* mean, double* sum) {
  int n = 0;
  *sum = 0;
  for (const auto& [rank, values] : figures) {
    auto it = values.find(std::string(figure));
    if (it == values.end()) continue;
    *sum += it->second;
    ++n;
  }
  if (n > 0) *mean = *sum / n;
  return n > 0;
}

void AddRunningJobFamilies(const ClusterMetrics& m, const MetricsPageOptions& options,
                           std::vector<MetricFamily>& out) {
  MetricFamily ips = Family("tessera_job_images_per_second",
                            "A running job's training throughput, all ranks together.",
                            MetricType::Gauge);
  MetricFamily step =
      Family("tessera_job_step_seconds", "A running job's mean step time over its ranks.",
             MetricType::Gauge);
  MetricFamily ranks =
      Family("tessera_job_ranks", "A running job's ranks.", MetricType::Gauge);
  MetricFamily restarts =
      Family("tessera_job_restarts_total",
             "A running job's restarts (attempts after the first, preemptions not "
             "counted).",
             MetricType::Counter);
  for (const ClusterMetrics::RunningJob& job : m.running) {
    const Labels labels = {
        {"job_id", absl::StrCat(job.id)},
        {"name", BoundedLabelValue(job.name, options.max_label_bytes)},
        {"owner", BoundedLabelValue(job.owner, options.max_label_bytes)}};
    double mean = 0, sum = 0;
    if (MeanOf(job.figures, kImagesPerSecFigure, &mean, &sum)) Add(ips, labels, sum);
    if (MeanOf(job.figures, kStepTimeMsFigure, &mean, &sum))
      Add(step, labels, mean / 1000);
    Add(ranks, labels, job.ranks);
    Add(restarts, labels, job.restarts);
  }
  for (MetricFamily* f : {&ips, &step, &ranks, &restarts}) out.push_back(std::move(*f));
}

// A rank's labels: its job, its index and, when known, its worker.
Labels RankLabels(const ClusterMetrics::RunningJob& job, int32_t rank,
                  const MetricsPageOptions& options) {
  Labels labels = {{"job_id", absl::StrCat(job.id)}, {"rank", absl::StrCat(rank)}};
  if (rank >= 0 && rank < static_cast<int32_t>(job.rank_workers.size())) {
    labels.emplace_back(
        "worker", BoundedLabelValue(job.rank_workers[rank], options.max_label_bytes));
  }
  return labels;
}

void AddRankFamilies(const ClusterMetrics& m, const MetricsPageOptions& options,
                     std::vector<MetricFamily>& out) {
  for (const RankFigureFamily& spec : kRankFigureFamilies) {
    MetricFamily f = Family(spec.name, spec.help, MetricType::Gauge);
    for (const ClusterMetrics::RunningJob& job : m.running) {
      for (const auto& [rank, values] : job.figures) {
        auto it = values.find(std::string(spec.figure));
        if (it == values.end()) continue;
        Add(f, RankLabels(job, rank, options), it->second * spec.scale);
      }
    }
    out.push_back(std::move(f));
  }
}

void AddStoreFamilies(const ClusterMetrics& m, const DatabaseFigures& db,
                      std::vector<MetricFamily>& out) {
  MetricFamily written =
      Family("tessera_metric_rows_written_total",
             "Metric rows stored (acknowledged to trainers).", MetricType::Counter);
  Add(written, {}, m.metric_rows_written);
  MetricFamily refused =
      Family("tessera_metric_rows_refused_total",
             "Metric rows refused: over a job's limits, of a stale attempt or an ended "
             "job, or not stored by a failing store.",
             MetricType::Counter);
  Add(refused, {}, m.metric_rows_refused);
  out.push_back(std::move(written));
  out.push_back(std::move(refused));
  MetricFamily size =
      Family("tessera_db_size_bytes", "The database file and its write-ahead log.",
             MetricType::Gauge);
  if (db.size_bytes >= 0) Add(size, {}, db.size_bytes);
  MetricFamily max = Family("tessera_db_max_bytes",
                            "The database's size limit (--db-max-bytes); absent: none.",
                            MetricType::Gauge);
  if (db.max_bytes > 0) Add(max, {}, db.max_bytes);
  MetricFamily free =
      Family("tessera_db_disk_free_bytes", "Free space on the database's file system.",
             MetricType::Gauge);
  if (db.disk_free_bytes >= 0) Add(free, {}, db.disk_free_bytes);
  MetricFamily reserve =
      Family("tessera_db_reserve_bytes",
             "Free space kept for job state (--db-reserve); below it metric rows and "
             "log lines are shed.",
             MetricType::Gauge);
  Add(reserve, {}, db.reserve_bytes);
  for (MetricFamily* f : {&size, &max, &free, &reserve}) out.push_back(std::move(*f));
}

void AddRetentionFamilies(const DatabaseFigures& db, std::vector<MetricFamily>& out) {
  MetricFamily over =
      Family("tessera_db_bytes_over_budget",
             "Data over --db-max-size that retention's last pass could not remove: kept "
             "metrics (evaluation results, report inputs), job records and running jobs' "
             "outputs; absent: no budget.",
             MetricType::Gauge);
  if (db.bytes_over_budget >= 0) Add(over, {}, db.bytes_over_budget);
  out.push_back(std::move(over));
  MetricFamily dropped =
      Family("tessera_db_retention_rows_dropped_total",
             "Rows database retention removed, by kind: metric rows downsampled by "
             "age, thinned to each series' last point or pruned to the kept metrics "
             "for --db-max-size, and log chunks.",
             MetricType::Counter);
  Add(dropped, {{"kind", "metrics_downsampled"}}, db.metric_rows_downsampled);
  Add(dropped, {{"kind", "metrics_thinned"}}, db.metric_rows_thinned);
  Add(dropped, {{"kind", "metrics_pruned"}}, db.metric_rows_pruned);
  Add(dropped, {{"kind", "log_chunks"}}, db.log_chunks_dropped);
  out.push_back(std::move(dropped));
}

void AddSlurmFamily(const ClusterMetrics& m, const MetricsPageOptions& options,
                    std::vector<MetricFamily>& out) {
  MetricFamily f = Family("tessera_slurm_allocations",
                          "Slurm allocations the coordinator tracks, by pool and state "
                          "(pending, running, completing, ended, other).",
                          MetricType::Gauge);
  for (const auto& [key, n] : m.slurm_allocations) {
    Add(f,
        {{"pool", BoundedLabelValue(key.first, options.max_label_bytes)},
         {"state", key.second}},
        n);
  }
  out.push_back(std::move(f));
}

}  // namespace

std::string BoundedLabelValue(std::string_view value, size_t max_bytes) {
  std::string out;
  const bool cut = value.size() > max_bytes;
  const size_t keep = cut ? (max_bytes > 3 ? max_bytes - 3 : 0) : value.size();
  out.reserve(keep + 3);
  for (size_t i = 0; i < keep; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '_');
  }
  if (cut) out.append(std::string(std::min<size_t>(3, max_bytes), '.'));
  return out;
}

std::string RenderMetricsPage(const ClusterMetrics& metrics, const DatabaseFigures& db,
                              const MetricsPageOptions& options) {
  std::vector<MetricFamily> families;
  AddJobFamilies(metrics, families);
  AddSearchFamily(metrics, families);
  AddWorkerFamilies(metrics, families);
  AddWorkerGpuFamilies(metrics, options, families);
  families.push_back(Histogram("tessera_rendezvous_duration_seconds",
                               "From an attempt's placement until all its ranks joined.",
                               metrics.rendezvous));
  families.push_back(Histogram("tessera_scheduling_duration_seconds",
                               "One pass of the scheduler over the queue.",
                               metrics.scheduling));
  families.push_back(Histogram("tessera_heartbeat_duration_seconds",
                               "Handling one worker heartbeat.", metrics.heartbeat));
  AddRunningJobFamilies(metrics, options, families);
  AddRankFamilies(metrics, options, families);
  AddStoreFamilies(metrics, db, families);
  AddRetentionFamilies(db, families);
  AddSlurmFamily(metrics, options, families);
  // A family without samples says nothing; promtool and scrapers need none.
  std::erase_if(families, [](const MetricFamily& f) { return f.metric.empty(); });
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace tessera
