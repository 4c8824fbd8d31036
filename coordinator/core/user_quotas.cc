#include "coordinator/core/user_quotas.h"

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/job_spec.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// memory_per_rank against --max-memory-per-rank (`cap` bytes, 0: none).
absl::Status CheckMemoryPerRank(const v1::JobSpec& spec, int64_t cap) {
  if (cap <= 0) return absl::OkStatus();
  absl::StatusOr<int64_t> bytes = MemoryPerRankBytes(spec);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory_per_rank: this coordinator caps a rank's memory at ", FormatByteSize(cap),
        " (--max-memory-per-rank); set memory_per_rank"));
  }
  if (*bytes > cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory_per_rank: ", FormatByteSize(*bytes), " is above the per-user cap of ",
        FormatByteSize(cap), " (--max-memory-per-rank)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status UserQuotas::CheckSubmit(const v1::JobSpec& spec, const std::string& owner,
                                     bool admin) {
  if (admin) return absl::OkStatus();
  const UserLimits& limits = state_.options.user_limits;
  if (spec.priority() > limits.max_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", spec.priority(), " is above ", limits.max_priority,
                     ", the highest a non-admin may set (--max-user-priority)"));
  }
  if (limits.max_running_ranks > 0 && spec.world_size() > limits.max_running_ranks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "world_size: ", spec.world_size(), " ranks exceed the per-user limit of ",
        limits.max_running_ranks, " running ranks (--max-running-ranks)"));
  }
  if (absl::Status memory = CheckMemoryPerRank(spec, limits.max_memory_per_rank_bytes);
      !memory.ok()) {
    return memory;
  }
  absl::MutexLock lock(&state_.mu);
  const UserLoad load = LoadByUserLocked()[owner];
  if (limits.max_queued_jobs > 0 && load.queued_jobs >= limits.max_queued_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user ", owner, " has ", load.queued_jobs, " queued jobs, the limit (",
        limits.max_queued_jobs, ", --max-queued-jobs); wait for some to start"));
  }
  return absl::OkStatus();
}

std::vector<UserShare> UserQuotas::GetShare(const Caller& caller) {
  absl::MutexLock lock(&state_.mu);
  AccrueUsageLocked();
  const absl::Time now = state_.clock->Now();
  std::map<std::string, UserLoad> load = LoadByUserLocked();
  std::set<std::string> users;
  for (const auto& [user, l] : load) users.insert(user);
  std::map<std::string, double> factors = state_.usage.Factors(now, users);
  std::map<std::string, int64_t> memory = MemoryLimitsByUserLocked();
  // The cap as it applies to the caller's lines: admins have none.
  const int64_t cap =
      caller.admin ? 0 : state_.options.user_limits.max_memory_per_rank_bytes;
  std::vector<UserShare> out;
  for (const auto& [user, factor] : factors) {
    if (!caller.MaySee(user)) continue;
    out.push_back(UserShare{.user = user,
                            .usage_slot_seconds = state_.usage.Usage(user, now),
                            .factor = factor,
                            .running_ranks = load[user].placed_ranks,
                            .queued_jobs = load[user].queued_jobs,
                            .running_memory_limit_bytes = memory[user],
                            .max_memory_per_rank_bytes = cap});
  }
  if (out.empty() && !caller.admin) {
    out.push_back(UserShare{.user = caller.name, .max_memory_per_rank_bytes = cap});
  }
  return out;
}

std::map<std::string, int64_t> UserQuotas::MemoryLimitsByUserLocked() const {
  std::map<std::string, int64_t> memory;
  for (const auto& [id, job] : state_.jobs) {
    if (job.record.state == v1::JOB_STATE_QUEUED) continue;
    absl::StatusOr<int64_t> per_rank = MemoryPerRankBytes(job.record.spec);
    if (!per_rank.ok() || *per_rank == 0) continue;
    std::map<std::string, std::vector<int32_t>> used;
    job.AddUsedSlots(used);
    for (const auto& [worker, slots] : used) {
      memory[job.record.owner] += *per_rank * static_cast<int64_t>(slots.size());
    }
  }
  return memory;
}

std::map<std::string, UserLoad> UserQuotas::LoadByUserLocked() const {
  std::map<std::string, UserLoad> load;
  for (const auto& [id, job] : state_.jobs) {
    UserLoad& l = load[job.record.owner];
    if (job.record.state == v1::JOB_STATE_QUEUED) {
      ++l.queued_jobs;
    } else {
      std::map<std::string, std::vector<int32_t>> used;
      job.AddUsedSlots(used);
      for (const auto& [worker, slots] : used) l.placed_ranks += slots.size();
    }
  }
  return load;
}

void UserQuotas::AccrueUsageLocked() {
  const absl::Time now = state_.clock->Now();
  if (now <= state_.last_accrual) return;
  const double seconds = absl::ToDoubleSeconds(now - state_.last_accrual);
  for (const auto& [user, load] : LoadByUserLocked()) {
    if (load.placed_ranks > 0)
      state_.usage.Charge(user, seconds * load.placed_ranks, now);
  }
  state_.last_accrual = now;
}

std::map<std::string, double> UserQuotas::FactorsLocked(
    const std::set<std::string>& owners) const {
  return state_.usage.Factors(state_.clock->Now(), owners);
}

void UserQuotas::RestoreLocked(const std::vector<UsageRecord>& usage) {
  for (const UsageRecord& u : usage) {
    state_.usage.Restore(u.user, u.slot_seconds, absl::FromUnixMillis(u.updated_unix_ms));
  }
  state_.last_accrual = state_.clock->Now();
}

std::vector<UsageRecord> UserQuotas::AccrueAndSnapshotLocked() {
  AccrueUsageLocked();
  std::vector<UsageRecord> usage;
  const absl::Time now = state_.clock->Now();
  if (now - state_.last_usage_save < state_.options.usage_save_interval) return usage;
  state_.last_usage_save = now;
  for (const FairShare::Entry& e : state_.usage.Entries()) {
    usage.push_back(UsageRecord{e.user, e.slot_seconds, absl::ToUnixMillis(e.at)});
  }
  return usage;
}

void UserQuotas::SaveUsage(const std::vector<UsageRecord>& usage) {
  if (usage.empty()) return;
  if (absl::Status saved = state_.store->PutUsage(usage); !saved.ok()) {
    spdlog::warn("cannot save fair-share usage: {}", saved.ToString());
  }
}

}  // namespace tessera
