#include "coordinator/core/rendezvous_rounds.h"

#include "absl/strings/str_cat.h"

namespace tessera {

void RendezvousRounds::Open(int64_t job_id, int32_t attempt,
                            std::vector<int32_t> local_ranks) {
  Round& round = rounds_[{job_id, attempt}];
  round = Round{};
  round.local_ranks = std::move(local_ranks);
}

absl::Status RendezvousRounds::Join(int64_t job_id, int32_t attempt, int32_t rank,
                                    const std::string& bootstrap,
                                    const std::string& backend, Callback cb,
                                    Releases* releases, bool* completed) {
  *completed = false;
  auto it = rounds_.find({job_id, attempt});
  if (it == rounds_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no rendezvous open for job ", job_id, " attempt ", attempt));
  }
  Round& round = it->second;
  const int32_t world = static_cast<int32_t>(round.local_ranks.size());
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  if (round.released) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rendezvous for job ", job_id, " attempt ", attempt, " already completed"));
  }
  if (rank == 0) {
    // A single rank has no peers to bootstrap.
    if (bootstrap.empty() && world > 1) {
      return absl::InvalidArgumentError("rank 0 must bring the bootstrap data");
    }
    round.bootstrap = bootstrap;
    round.backend = backend;
  }
  auto existing = round.waiters.find(rank);
  if (existing != round.waiters.end()) {
    releases->emplace_back(std::move(existing->second),
                           absl::AbortedError("superseded by a newer join of this rank"));
    round.waiters.erase(existing);
  }
  round.waiters.emplace(rank, std::move(cb));
  if (static_cast<int32_t>(round.waiters.size()) < world) return absl::OkStatus();

  round.released = true;
  *completed = true;
  for (auto& [r, waiter] : round.waiters) {
    RendezvousResult result;
    result.rank = r;
    result.local_rank = round.local_ranks[r];
    result.world_size = world;
    result.attempt = attempt;
    result.bootstrap = *round.bootstrap;
    result.backend = round.backend;
    releases->emplace_back(std::move(waiter), std::move(result));
  }
  round.waiters.clear();
  return absl::OkStatus();
}

RendezvousRounds::Releases RendezvousRounds::Close(int64_t job_id, int32_t attempt,
                                                   const absl::Status& reason) {
  Releases releases;
  auto it = rounds_.find({job_id, attempt});
  if (it == rounds_.end()) return releases;
  for (auto& [r, waiter] : it->second.waiters) {
    releases.emplace_back(std::move(waiter), reason);
  }
  rounds_.erase(it);
  return releases;
}

RendezvousRounds::Releases RendezvousRounds::CloseAll(const absl::Status& reason) {
  Releases releases;
  for (auto& [key, round] : rounds_) {
    for (auto& [r, waiter] : round.waiters)
      releases.emplace_back(std::move(waiter), reason);
  }
  rounds_.clear();
  return releases;
}

bool RendezvousRounds::IsOpen(int64_t job_id, int32_t attempt) const {
  return rounds_.contains({job_id, attempt});
}

std::optional<std::vector<int32_t>> RendezvousRounds::Missing(int64_t job_id,
                                                              int32_t attempt) const {
  auto it = rounds_.find({job_id, attempt});
  if (it == rounds_.end()) return std::nullopt;
  std::vector<int32_t> missing;
  if (it->second.released) return missing;
  for (int32_t r = 0; r < static_cast<int32_t>(it->second.local_ranks.size()); ++r) {
    if (!it->second.waiters.contains(r)) missing.push_back(r);
  }
  return missing;
}

}  // namespace tessera
