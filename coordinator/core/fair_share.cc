#include "coordinator/core/fair_share.h"

#include <algorithm>
#include <cmath>

namespace tessera {

double FairShare::Decayed(const Entry& e, absl::Time now) const {
  if (now <= e.at || half_life_ <= absl::ZeroDuration()) return e.slot_seconds;
  return e.slot_seconds * std::exp2(-absl::FDivDuration(now - e.at, half_life_));
}

void FairShare::Charge(const std::string& user, double slot_seconds, absl::Time now) {
  Entry& e = entries_[user];
  if (e.user.empty()) {
    e.user = user;
    e.at = now;
  }
  e.slot_seconds = Decayed(e, now) + std::max(0.0, slot_seconds);
  e.at = std::max(e.at, now);
}

void FairShare::Restore(const std::string& user, double slot_seconds, absl::Time at) {
  entries_[user] = Entry{user, std::max(0.0, slot_seconds), at};
}

double FairShare::Usage(const std::string& user, absl::Time now) const {
  auto it = entries_.find(user);
  return it == entries_.end() ? 0 : Decayed(it->second, now);
}

std::map<std::string, double> FairShare::Factors(
    absl::Time now, const std::set<std::string>& also) const {
  std::map<std::string, double> usage;
  double total = 0;
  for (const auto& [user, e] : entries_) {
    usage[user] = Decayed(e, now);
    total += usage[user];
  }
  for (const std::string& user : also) usage.emplace(user, 0.0);
  std::map<std::string, double> factors;
  const double share = usage.empty() ? 1 : 1.0 / static_cast<double>(usage.size());
  for (const auto& [user, used] : usage) {
    factors[user] = total > 0 ? std::exp2(-(used / total) / share) : 1.0;
  }
  return factors;
}

std::vector<FairShare::Entry> FairShare::Entries() const {
  std::vector<Entry> out;
  out.reserve(entries_.size());
  for (const auto& [user, e] : entries_) out.push_back(e);
  return out;
}

}  // namespace tessera
