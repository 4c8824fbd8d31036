#include "coordinator/core/slurm/slurm_pool.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/core/slurm/slurm_client.h"

namespace tessera {

namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

bool Ended(const SlurmAllocation& a) {
  return a.state.empty() || IsSlurmStateFinal(a.state);
}

// The pool's workers, by allocation.
std::map<std::string, std::vector<const SlurmPoolWorker*>> WorkersByAllocation(
    const std::vector<SlurmPoolWorker>& workers) {
  std::map<std::string, std::vector<const SlurmPoolWorker*>> by;
  for (const SlurmPoolWorker& w : workers) {
    if (!w.slurm_job_id.empty()) by[w.slurm_job_id].push_back(&w);
  }
  return by;
}

// Why a running allocation should be cancelled, or "" to keep it.
std::string CancelRunning(const SlurmPoolConfig* pool, const SlurmAllocation& a,
                          const std::vector<const SlurmPoolWorker*>& workers,
                          bool job_waits, absl::Time now) {
  if (a.state == "CG") return "";  // already ending
  int32_t busy = 0;
  int32_t draining = 0;
  absl::Time idle_from = absl::InfinitePast();  // when the last worker became idle
  for (const SlurmPoolWorker* w : workers) {
    if (w->running_ranks > 0) ++busy;
    if (w->draining) ++draining;
    idle_from = std::max(idle_from, w->idle_since);
  }
  const int32_t registered = static_cast<int32_t>(workers.size());
  if (registered > 0 && draining == registered && busy == 0) {
    return "its workers have drained";
  }
  if (registered == 0 && !job_waits) {
    return absl::StrCat("job ", a.job_id, " no longer waits for it");
  }
  if (pool == nullptr) return "";
  const absl::Time since = a.running_since;
  if (registered < a.nodes && since != absl::InfiniteFuture() &&
      now - since >= pool->register_timeout) {
    return absl::StrCat("only ", registered, " of ", a.nodes,
                        " workers registered within ",
                        absl::FormatDuration(pool->register_timeout));
  }
  if (!job_waits && busy == 0 && now - idle_from >= pool->idle_timeout) {
    return absl::StrCat("its workers were idle for ",
                        absl::FormatDuration(pool->idle_timeout));
  }
  return "";
}

// The nodes of the allocation `pool` would get for `job` now, or why it gets
// none: it cannot host the job, its last submission for the job failed less
// than retry_after ago, or it has max_allocations in flight.
absl::StatusOr<int32_t> NodesToSubmit(const SlurmPoolConfig& pool, const WaitingJob& job,
                                      const std::vector<SlurmSubmitFailure>& failures,
                                      int32_t in_flight, absl::Time now,
                                      const SlurmPoolOptions& options) {
  absl::StatusOr<int32_t> nodes = AllocationNodes(pool, job);
  if (!nodes.ok()) return nodes;
  for (const SlurmSubmitFailure& f : failures) {
    if (f.pool != pool.name || f.job_id != job.job_id) continue;
    if (now - f.at < options.retry_after) {
      return absl::UnavailableError(absl::StrCat(
          "Slurm submission to pool ", pool.name, " failed: ", f.error, "; retrying in ",
          absl::FormatDuration(
              absl::Trunc(options.retry_after - (now - f.at), absl::Seconds(1)))));
    }
  }
  if (pool.max_allocations > 0 && in_flight >= pool.max_allocations) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Slurm pool ", pool.name, " has ", pool.max_allocations, " of ",
                     pool.max_allocations, " allocations in flight"));
  }
  return nodes;
}

// The pools to try for `job`, in order: file order, with the CPU pools
// first for a job that may use either kind.
std::vector<const SlurmPoolConfig*> PoolsToTry(const std::vector<SlurmPoolConfig>& pools,
                                               const WaitingJob& job) {
  std::vector<const SlurmPoolConfig*> order;
  for (const SlurmPoolConfig& p : pools) order.push_back(&p);
  if (job.kind == SlurmNodeKind::kAny) {
    std::stable_partition(order.begin(), order.end(),
                          [](const SlurmPoolConfig* p) { return p->gpus_per_node == 0; });
  }
  return order;
}

}  // namespace

SlurmNodeKind SlurmNodeKindOf(const v1::TrainerConfig& trainer) {
  if (trainer.device() == "cuda") return SlurmNodeKind::kGpu;
  if (trainer.device() == "cpu") return SlurmNodeKind::kCpu;
  if (trainer.precision() == "bf16" || trainer.precision() == "fp16") {
    return SlurmNodeKind::kGpu;
  }
  return SlurmNodeKind::kAny;
}

absl::StatusOr<int32_t> AllocationNodes(const SlurmPoolConfig& pool,
                                        const WaitingJob& job) {
  const bool gpu_pool = pool.gpus_per_node > 0;
  if (job.kind != SlurmNodeKind::kAny && (job.kind == SlurmNodeKind::kGpu) != gpu_pool) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pool ", pool.name, " has ", gpu_pool ? "GPU" : "CPU", " nodes; the job needs ",
        job.kind == SlurmNodeKind::kGpu ? "GPUs" : "CPUs"));
  }
  if (job.world_size < 1) return absl::InvalidArgumentError("world size below 1");
  const int32_t slots = pool.slots_per_node();
  int32_t nodes = 0;
  int32_t per_node = job.per_node;
  if (job.nodes > 0) {
    nodes = job.nodes;
    if (per_node == 0) per_node = CeilDiv(job.world_size, job.nodes);
  } else if (per_node > 0) {
    nodes = CeilDiv(job.world_size, per_node);
  } else {
    nodes = CeilDiv(job.world_size, slots);
    per_node = std::min(job.world_size, slots);
  }
  if (per_node > slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool ", pool.name, ": needs ", per_node,
                     " ranks per node, a node has ", slots, " slots"));
  }
  if (nodes > pool.max_nodes) {
    return absl::InvalidArgumentError(absl::StrCat("pool ", pool.name, ": needs ", nodes,
                                                   " nodes, at most ", pool.max_nodes));
  }
  return nodes;
}

std::string SlurmWaitReason(const SlurmAllocation& a, int32_t registered) {
  std::string detail = a.state;
  if (IsSlurmStatePending(a.state)) {
    if (!a.reason.empty() && a.reason != "None") absl::StrAppend(&detail, ": ", a.reason);
  } else {
    absl::StrAppend(&detail, ": ", registered, " of ", a.nodes, " workers registered");
  }
  return absl::StrCat("waiting for Slurm allocation ", a.slurm_job_id, " (", detail, ")");
}

SlurmPoolPlan PlanSlurmPools(const std::vector<SlurmPoolConfig>& pools,
                             const SlurmPoolState& state, absl::Time now,
                             const SlurmPoolOptions& options) {
  SlurmPoolPlan plan;
  std::map<std::string, const SlurmPoolConfig*> pool_by_name;
  for (const SlurmPoolConfig& p : pools) pool_by_name[p.name] = &p;
  std::set<int64_t> waiting;
  for (const WaitingJob& j : state.waiting) waiting.insert(j.job_id);
  const auto workers = WorkersByAllocation(state.workers);
  auto workers_of = [&](const std::string& id) {
    auto it = workers.find(id);
    return it == workers.end() ? std::vector<const SlurmPoolWorker*>{} : it->second;
  };

  // Allocations: forget the ended, cancel those no longer needed. The rest
  // serve their jobs and count against their pools' limits.
  std::map<int64_t, const SlurmAllocation*> serving;  // job -> its live allocation
  std::map<std::string, int32_t> in_flight;           // pool -> live allocations
  for (const SlurmAllocation& a : state.allocations) {
    if (Ended(a)) {
      plan.forget.push_back(a.slurm_job_id);
      continue;
    }
    ++in_flight[a.pool];
    if (a.cancel_sent) continue;
    const bool job_waits = waiting.contains(a.job_id);
    std::string why;
    if (IsSlurmStatePending(a.state)) {
      if (!job_waits) why = absl::StrCat("job ", a.job_id, " no longer waits for it");
    } else {
      auto pool = pool_by_name.find(a.pool);
      why = CancelRunning(pool == pool_by_name.end() ? nullptr : pool->second, a,
                          workers_of(a.slurm_job_id), job_waits, now);
    }
    if (!why.empty()) {
      plan.cancel.push_back({a.slurm_job_id, why});
      continue;
    }
    if (job_waits && !serving.contains(a.job_id)) {
      serving[a.job_id] = &a;
      for (const SlurmPoolWorker* w : workers_of(a.slurm_job_id)) {
        plan.reserved_workers[w->name] = a.job_id;
      }
    }
  }

  // Waiting jobs: report the allocation that serves one, or submit one.
  for (const WaitingJob& job : state.waiting) {
    if (auto it = serving.find(job.job_id); it != serving.end()) {
      const SlurmAllocation& a = *it->second;
      plan.pending_reasons[job.job_id] =
          SlurmWaitReason(a, static_cast<int32_t>(workers_of(a.slurm_job_id).size()));
      continue;
    }
    std::vector<std::string> why_not;
    bool submitted = false;
    for (const SlurmPoolConfig* const pool_ptr : PoolsToTry(pools, job)) {
      const SlurmPoolConfig& pool = *pool_ptr;
      absl::StatusOr<int32_t> nodes =
          NodesToSubmit(pool, job, state.failures, in_flight[pool.name], now, options);
      if (!nodes.ok()) {
        why_not.emplace_back(nodes.status().message());
        continue;
      }
      ++in_flight[pool.name];
      plan.submit.push_back({pool.name, job.job_id, *nodes, job.owner});
      plan.pending_reasons[job.job_id] =
          absl::StrCat("submitting a Slurm allocation of ", *nodes, " node",
                       *nodes == 1 ? "" : "s", " in pool ", pool.name);
      submitted = true;
      break;
    }
    if (!submitted && !pools.empty()) {
      plan.pending_reasons[job.job_id] =
          absl::StrCat("no Slurm allocation: ", absl::StrJoin(why_not, "; "));
    }
  }
  return plan;
}

}  // namespace tessera
