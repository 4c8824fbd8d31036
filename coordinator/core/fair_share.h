// FairShare: each user's recent use of the cluster and the fair-share factor
// the scheduler orders equal-priority jobs by, after Slurm's classic
// fair-share factor.
//
// Usage is counted in slot-seconds (one rank holding one slot for one second)
// and decays with a half-life: use from one half-life ago counts half. With N
// users known (those with recorded usage or queued jobs) and equal shares
// S = 1/N, a user whose decayed usage is the fraction U of everyone's has
// factor F = 2^(-U/S): 1 with no recent use, 0.5 at exactly their share,
// toward 0 for heavy users. So one user's 50 queued jobs do not starve
// another user's one: the light user's job sorts first.
//
// Thread-safety: none; JobManager calls it under its mutex.
#ifndef TESSERA_COORDINATOR_CORE_FAIR_SHARE_H_
#define TESSERA_COORDINATOR_CORE_FAIR_SHARE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tessera {

// What one user holds now: ranks placed (scheduled or running) and jobs queued.
struct UserLoad {
  int32_t placed_ranks = 0;
  int32_t queued_jobs = 0;
};

class FairShare {
 public:
  explicit FairShare(absl::Duration half_life) : half_life_(half_life) {}

  // Adds `slot_seconds` of use by `user` at `now`; what was recorded before
  // decays to `now` first.
  void Charge(const std::string& user, double slot_seconds, absl::Time now);
  // Sets a user's usage as recorded at `at` (recovery from the store).
  void Restore(const std::string& user, double slot_seconds, absl::Time at);

  // `user`'s usage decayed to `now`.
  double Usage(const std::string& user, absl::Time now) const;
  // Factors at `now` for every user with usage and for `also` (users with
  // queued jobs), in (0, 1].
  std::map<std::string, double> Factors(absl::Time now,
                                        const std::set<std::string>& also = {}) const;

  struct Entry {
    std::string user;
    double slot_seconds = 0;  // as of `at`
    absl::Time at;
  };
  // What to persist.
  std::vector<Entry> Entries() const;

 private:
  double Decayed(const Entry& e, absl::Time now) const;

  const absl::Duration half_life_;
  std::map<std::string, Entry> entries_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_FAIR_SHARE_H_
