#include "coordinator/core/worker_registry.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/worker_fields.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

std::optional<double> Finite(double v) {
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::optional<double> FiniteNonNegative(double v) {
  return std::isfinite(v) && v >= 0 ? std::optional<double>(v) : std::nullopt;
}

std::optional<int64_t> NonNegative(int64_t v) {
  return v >= 0 ? std::optional<int64_t>(v) : std::nullopt;
}

// A heartbeat's GPU readings as the registry keeps them: only the worker's own
// GPUs, each once, at most kMaxWorkerGpuReadings, values checked (see
// WorkerRegistry::Heartbeat).
std::vector<GpuReading> CheckedGpuReadings(
    const google::protobuf::RepeatedPtrField<v1::WorkerGpuReading>& readings,
    const std::vector<std::string>& gpu_ids) {
  std::vector<GpuReading> out;
  std::set<std::string> seen;
  for (const v1::WorkerGpuReading& r : readings) {
    if (out.size() >= static_cast<size_t>(kMaxWorkerGpuReadings)) break;
    if (std::find(gpu_ids.begin(), gpu_ids.end(), r.gpu_id()) == gpu_ids.end()) continue;
    if (!seen.insert(r.gpu_id()).second) continue;
    GpuReading g;
    g.id = r.gpu_id();
    if (r.has_utilization_percent() && std::isfinite(r.utilization_percent())) {
      g.utilization_percent = std::clamp(r.utilization_percent(), 0.0, 100.0);
    }
    if (r.has_memory_used_bytes())
      g.memory_used_bytes = NonNegative(r.memory_used_bytes());
    if (r.has_memory_total_bytes()) {
      g.memory_total_bytes = NonNegative(r.memory_total_bytes());
    }
    if (r.has_temperature_celsius())
      g.temperature_celsius = Finite(r.temperature_celsius());
    if (r.has_power_watts()) g.power_watts = FiniteNonNegative(r.power_watts());
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

HeartbeatReport::HeartbeatReport(const v1::HeartbeatRequest& request, bool registration)
    : request_(&request), registration_(registration) {
  for (const v1::LocalRank& lr : request.ranks()) {
    listed_.insert({lr.job_id(), lr.attempt(), lr.rank()});
    listed_ranks_.insert({lr.job_id(), lr.rank()});
  }
}

bool HeartbeatReport::Lists(int64_t job_id, int32_t attempt, int32_t rank) const {
  return listed_.contains({job_id, attempt, rank});
}

bool HeartbeatReport::ListsRank(int64_t job_id, int32_t rank) const {
  return listed_ranks_.contains({job_id, rank});
}

RankVerdict HeartbeatReport::Reconcile(const v1::LocalRank& reported,
                                       const RankBelief& belief) const {
  if (!belief.current) {
    // A rank of an earlier attempt or of a job that ended: stop it while it
    // runs, and forget it (freeing its slot) once it is gone.
    return reported.exited() ? RankVerdict::kForget : RankVerdict::kStop;
  }
  if (reported.exited()) {
    return belief.state == RankState::kExited ? RankVerdict::kAcknowledgeExit
                                              : RankVerdict::kRecordExit;
  }
  // Counted as gone (its worker was declared dead) but still running: stop it.
  if (belief.state == RankState::kExited) return RankVerdict::kStop;
  if (belief.state == RankState::kAssigned || belief.pid != reported.pid()) {
    return RankVerdict::kRecordRunning;
  }
  return RankVerdict::kNone;
}

RankVerdict HeartbeatReport::ReconcileUnlisted(const RankBelief& belief) const {
  if (!belief.current) return RankVerdict::kForget;
  if (belief.state == RankState::kExited) return RankVerdict::kNone;
  if (belief.state == RankState::kRunning) return RankVerdict::kLost;
  return RankVerdict::kNone;
}

WorkerRegistry::WorkerRegistry(StoreWriter* writer, const Clock* clock,
                               WorkerRegistryOptions options)
    : writer_(writer), clock_(clock), options_(options) {}

void WorkerRegistry::Recover(std::vector<WorkerRecord> workers) {
  for (auto& w : workers) {
    w.last_seen_unix_ms = absl::ToUnixMillis(clock_->Now());
    std::string name = w.name;
    WorkerState& state = workers_[name] = WorkerState{std::move(w)};
    if (!state.record.admin_drain.empty()) {
      // An admin's drain outlives the restart; a past deadline acts at once.
      state.draining = true;
      state.drain_reason = state.record.admin_drain;
      state.drain_deadline =
          state.record.admin_drain_deadline_unix_ms == 0
              ? absl::InfiniteFuture()
              : absl::FromUnixMillis(state.record.admin_drain_deadline_unix_ms);
    }
  }
}

absl::StatusOr<v1::RegisterWorkerResponse> WorkerRegistry::Register(
    const v1::RegisterWorkerRequest& request) {
  if (request.name().empty() || request.name().size() > 128) {
    return absl::InvalidArgumentError("name: must be 1-128 characters");
  }
  if (request.slots() < 0 || request.slots() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots: must be between 0 and 4096, got ", request.slots()));
  }
  // Labels shown in tessctl and the dashboard and kept in the store.
  const struct {
    const char* what;
    const std::string& value;
    size_t max;
  } labels[] = {{"hostname", request.hostname(), 255},
                {"device_kind", request.device_kind(), 32},
                {"pool", request.pool(), 64},
                {"slurm_job_id", request.slurm_job_id(), 64}};
  for (const auto& label : labels) {
    if (label.value.size() > label.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          label.what, ": at most ", label.max, " characters, got ", label.value.size()));
    }
  }
  if (absl::Status s = CheckGpuIds(request.gpu_ids()); !s.ok()) return s;
  WorkerState& w = workers_[request.name()];
  w.record.name = request.name();
  w.record.hostname = request.hostname();
  w.record.slots = request.slots();
  w.record.device_kind = request.device_kind().empty() ? "cpu" : request.device_kind();
  w.record.epoch += 1;
  w.record.last_seen_unix_ms = absl::ToUnixMillis(clock_->Now());
  w.record.pool = request.pool();
  w.record.slurm_job_id = request.slurm_job_id();
  w.record.gpu_ids.assign(request.gpu_ids().begin(), request.gpu_ids().end());
  w.gpus.clear();  // of the previous session
  w.dead = false;
  if (w.self_drain) {
    // It drained itself to stop; a new session is a fresh start.
    w.draining = false;
    w.self_drain = false;
    w.drain_reason.clear();
    w.drain_deadline = absl::InfiniteFuture();
  }
  writer_->UpsertWorker(w.record);
  spdlog::info("worker {} registered from {}: {} {} slots, epoch {}", w.record.name,
               w.record.hostname, w.record.slots, w.record.device_kind, w.record.epoch);
  v1::RegisterWorkerResponse response;
  response.set_epoch(w.record.epoch);
  response.set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  return response;
}

absl::StatusOr<HeartbeatReport> WorkerRegistry::Heartbeat(
    const v1::HeartbeatRequest& request) {
  auto it = workers_.find(request.name());
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", request.name(), " is not registered"));
  }
  WorkerRecord& worker = it->second.record;
  if (request.epoch() != worker.epoch || it->second.dead) {
    // No epoch in the message: the current one is not the caller's business.
    return absl::AbortedError(
        absl::StrCat("stale session for worker ", request.name(), "; register again"));
  }
  worker.last_seen_unix_ms = absl::ToUnixMillis(clock_->Now());
  writer_->UpsertWorker(worker);
  it->second.gpus = CheckedGpuReadings(request.gpus(), worker.gpu_ids);
  return HeartbeatReport(request);
}

absl::Status WorkerRegistry::CheckSession(const std::string& name, int64_t epoch) const {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.record.epoch != epoch || it->second.dead) {
    return absl::AbortedError(absl::StrCat("stale or unknown session for worker ", name));
  }
  return absl::OkStatus();
}

absl::Duration WorkerRegistry::SilentFor(const WorkerState& w) const {
  return clock_->Now() - absl::FromUnixMillis(w.record.last_seen_unix_ms);
}

bool WorkerRegistry::AliveState(const WorkerState& w) const {
  return !w.dead && SilentFor(w) <= options_.suspect_after;
}

bool WorkerRegistry::Alive(const std::string& name) const {
  auto it = workers_.find(name);
  return it != workers_.end() && AliveState(it->second);
}

absl::Status WorkerRegistry::Drain(const std::string& name, const std::string& reason,
                                   absl::Time deadline, bool self) {
  auto it = workers_.find(name);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", name, " is not registered"));
  }
  WorkerState& w = it->second;
  if (w.draining) {
    // A second drain may only shorten the wait.
    w.drain_deadline = std::min(w.drain_deadline, deadline);
    if (!self) w.self_drain = false;
  } else {
    w.draining = true;
    w.self_drain = self;
    w.drain_reason = reason;
    w.drain_deadline = deadline;
    spdlog::info("worker {} draining ({})", name, reason);
  }
  if (!w.self_drain) StoreAdminDrain(w);
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Undrain(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", name, " is not registered"));
  }
  WorkerState& w = it->second;
  w.draining = false;
  w.self_drain = false;
  w.drain_reason.clear();
  w.drain_deadline = absl::InfiniteFuture();
  StoreAdminDrain(w);
  spdlog::info("worker {} takes ranks again (undrained)", name);
  return absl::OkStatus();
}

void WorkerRegistry::StoreAdminDrain(WorkerState& w) {
  const bool admin = w.draining && !w.self_drain;
  w.record.admin_drain = admin ? w.drain_reason : "";
  w.record.admin_drain_deadline_unix_ms =
      admin && w.drain_deadline != absl::InfiniteFuture()
          ? absl::ToUnixMillis(w.drain_deadline)
          : 0;
  writer_->UpsertWorker(w.record);
}

bool WorkerRegistry::Draining(const std::string& name) const {
  auto it = workers_.find(name);
  return it != workers_.end() && it->second.draining;
}

absl::Time WorkerRegistry::DrainDeadline(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() || !it->second.draining ? absl::InfiniteFuture()
                                                      : it->second.drain_deadline;
}

std::string WorkerRegistry::DrainReason(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? "" : it->second.drain_reason;
}

std::vector<std::string> WorkerRegistry::DrainingWorkers() const {
  std::vector<std::string> out;
  for (const auto& [name, w] : workers_) {
    if (w.draining) out.push_back(name);
  }
  return out;
}

bool WorkerRegistry::Live(const std::string& name) const {
  auto it = workers_.find(name);
  return it != workers_.end() && !it->second.dead;
}

std::vector<std::string> WorkerRegistry::Silent() const {
  std::vector<std::string> out;
  for (const auto& [name, w] : workers_) {
    if (!w.dead && SilentFor(w) > options_.dead_after) out.push_back(name);
  }
  return out;
}

std::string WorkerRegistry::DeclareDead(const std::string& name) {
  WorkerState& worker = workers_.at(name);
  worker.dead = true;
  worker.record.epoch += 1;
  writer_->UpsertWorker(worker.record);
  std::string why = absl::StrCat("worker ", name, " declared dead (no heartbeat for ",
                                 absl::FormatDuration(SilentFor(worker)), ")");
  spdlog::warn("{}", why);
  return why;
}

std::vector<WorkerInventory> WorkerRegistry::Inventory(
    const std::map<std::string, std::vector<int32_t>>& used) const {
  std::vector<WorkerInventory> out;
  out.reserve(workers_.size());
  for (const auto& [name, w] : workers_) {
    auto it = used.find(name);
    out.push_back(WorkerInventory{name, w.record.slots,
                                  it == used.end() ? std::vector<int32_t>() : it->second,
                                  AliveState(w) && !w.draining});
  }
  return out;
}

std::vector<GpuReading> WorkerRegistry::Gpus(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? std::vector<GpuReading>() : it->second.gpus;
}

std::vector<v1::Worker> WorkerRegistry::List(
    const std::map<std::string, std::vector<int32_t>>& used) const {
  std::vector<v1::Worker> out;
  out.reserve(workers_.size());
  for (const auto& [name, w] : workers_) {
    auto it = used.find(name);
    v1::Worker p;
    p.set_name(name);
    p.set_hostname(w.record.hostname);
    p.set_slots(w.record.slots);
    p.set_slots_used(it == used.end() ? 0 : static_cast<int32_t>(it->second.size()));
    p.set_alive(AliveState(w));
    p.set_last_seen_unix_ms(w.record.last_seen_unix_ms);
    p.set_epoch(w.record.epoch);
    p.set_device_kind(w.record.device_kind);
    p.set_draining(w.draining);
    p.set_drained(w.draining && p.slots_used() == 0);
    p.set_drain_reason(w.drain_reason);
    p.set_pool(w.record.pool);
    p.set_slurm_job_id(w.record.slurm_job_id);
    for (const std::string& id : w.record.gpu_ids) p.add_gpu_ids(id);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tessera
