#include "worker/trainer/dist/pending_collective_tracker.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::trainer {

std::string DescribeCollective(const PendingCollectiveInfo& info) {
  std::string text = absl::StrCat(info.name, " #", info.sequence);
  if (info.bucket != kNoBucket) absl::StrAppend(&text, " (bucket ", info.bucket, ")");
  return text;
}

uint64_t PendingCollectiveTracker::Begin(absl::string_view name, int bucket, bool ready) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = ++issued_;
  pending_.emplace(sequence, PendingCollectiveInfo{.sequence = sequence,
                                                   .name = std::string(name),
                                                   .bucket = bucket,
                                                   .started_at = now,
                                                   .ready = ready});
  return sequence;
}

void PendingCollectiveTracker::MarkReady(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(sequence);
  if (it != pending_.end()) it->second.ready = true;
}

void PendingCollectiveTracker::End(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  pending_.erase(sequence);
}

std::optional<PendingCollectiveInfo> PendingCollectiveTracker::Oldest() const {
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) return std::nullopt;
  return pending_.begin()->second;
}

std::vector<PendingCollectiveInfo> PendingCollectiveTracker::Pending() const {
  absl::MutexLock lock(&mu_);
  std::vector<PendingCollectiveInfo> pending;
  pending.reserve(pending_.size());
  for (const auto& [sequence, info] : pending_) pending.push_back(info);
  return pending;
}

uint64_t PendingCollectiveTracker::issued() const {
  absl::MutexLock lock(&mu_);
  return issued_;
}

}  // namespace tessera::trainer
