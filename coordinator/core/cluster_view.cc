#include "coordinator/core/cluster_view.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "common/job_state.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

std::string LowerStateName(v1::JobState state) {
  return absl::AsciiStrToLower(JobStateName(state));
}

// Slurm's short job states, as /metrics names them.
std::string SlurmStateName(const std::string& state) {
  if (state.empty()) return "ended";
  if (state == "PD" || state == "CF") return "pending";
  if (state == "R") return "running";
  if (state == "CG") return "completing";
  return "other";
}

const char* WorkerState(const v1::Worker& w, bool live) {
  if (!live) return kWorkerDead;
  if (w.drained()) return kWorkerDrained;
  if (w.draining()) return kWorkerDraining;
  return w.alive() ? kWorkerAlive : kWorkerSuspect;
}

}  // namespace

ClusterMetrics ClusterView::ReadClusterMetrics() {
  ClusterMetrics out;
  {
    absl::MutexLock lock(&state_.mu);
    AddWorkerMetricsLocked(out);
    AddJobMetricsLocked(out);
  }
  AddSlurmMetrics(out);
  out.metric_rows_written = state_.metric_rows_written.load();
  out.metric_rows_refused = state_.metric_rows_refused.load();
  out.rendezvous = state_.rendezvous_latency.Read();
  out.scheduling = state_.scheduling_latency.Read();
  out.heartbeat = state_.heartbeat_latency.Read();
  return out;
}

int64_t ClusterView::SlotCapacity() {
  int64_t slots = 0;
  {
    absl::MutexLock lock(&state_.mu);
    for (const v1::Worker& w : state_.workers.List(state_.UsedSlotsLocked())) {
      if (state_.workers.Live(w.name()) && !w.draining()) slots += w.slots();
    }
  }
  SlurmPoolManager* const slurm = state_.slurm.load();
  if (slurm == nullptr) return slots;
  for (const SlurmPoolConfig& pool : slurm->pools()) {
    if (pool.max_allocations <= 0) return std::numeric_limits<int64_t>::max();
    slots += int64_t{pool.max_allocations} * pool.max_nodes * pool.slots_per_node();
  }
  return slots;
}

ClusterView::StoreMode ClusterView::GetStoreMode() const {
  if (!state_.writer->healthy()) return StoreMode::kNotServing;
  return state_.writer->shedding() ? StoreMode::kDegraded : StoreMode::kServing;
}

void ClusterView::AddWorkerMetricsLocked(ClusterMetrics& out) {
  for (const char* state :
       {kWorkerAlive, kWorkerSuspect, kWorkerDead, kWorkerDraining, kWorkerDrained}) {
    out.workers_by_state[state] = 0;
  }
  out.slots["cpu"] = {};
  out.slots["gpu"] = {};
  for (const v1::Worker& w : state_.workers.List(state_.UsedSlotsLocked())) {
    const bool live = state_.workers.Live(w.name());
    ++out.workers_by_state[WorkerState(w, live)];
    if (!live) continue;
    ClusterMetrics::Slots& slots = out.slots[w.device_kind() == "cuda" ? "gpu" : "cpu"];
    slots.total += w.slots();
    slots.used += w.slots_used();
    std::vector<GpuReading> gpus = state_.workers.Gpus(w.name());
    if (!gpus.empty()) out.worker_gpus[w.name()] = std::move(gpus);
  }
}

void ClusterView::AddJobMetricsLocked(ClusterMetrics& out) {
  for (v1::JobState state :
       {v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING}) {
    out.jobs_by_state[LowerStateName(state)] = 0;
  }
  for (v1::JobState state :
       {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    auto it = state_.jobs_ended.find(state);
    out.jobs_ended[LowerStateName(state)] =
        it == state_.jobs_ended.end() ? 0 : it->second;
  }
  const absl::Time now = state_.clock->Now();
  for (const auto& [id, job] : state_.jobs) {
    const v1::JobState state = job.record.state;
    if (IsTerminal(state)) continue;  // ended, its ranks still being stopped
    ++out.jobs_by_state[LowerStateName(state)];
    if (state == v1::JOB_STATE_QUEUED) {
      out.oldest_queued_seconds =
          std::max(out.oldest_queued_seconds, absl::ToDoubleSeconds(now - job.queued_at));
    }
    if (state != v1::JOB_STATE_RUNNING) continue;
    ClusterMetrics::RunningJob running;
    running.id = id;
    running.name = job.record.spec.name();
    running.owner = job.record.owner;
    running.ranks = static_cast<int32_t>(job.ranks.size());
    running.restarts = std::max(0, job.record.attempt - 1 - job.record.preemptions);
    running.figures = state_.figures.Of(id);
    for (const RankRecord& rank : job.ranks) running.rank_workers.push_back(rank.worker);
    out.running.push_back(std::move(running));
  }
}

void ClusterView::AddSlurmMetrics(ClusterMetrics& out) {
  SlurmPoolManager* const slurm = state_.slurm.load();
  if (slurm == nullptr) return;
  for (const SlurmAllocation& a : slurm->Allocations()) {
    ++out.slurm_allocations[{a.pool, SlurmStateName(a.state)}];
  }
}

}  // namespace tessera
