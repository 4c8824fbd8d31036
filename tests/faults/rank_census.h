// What really runs: the trainer processes of one cluster found in /proc, and a
// sampler that watches them for the whole of a fault test.
//
// The fault tests never trust a worker's report of its ranks. A trainer is
// recognised by its argv (the worker starts `tessera-train --coordinator=ADDR
// --job-id=J --attempt=A --rank=R ...`), and its node by the network namespace
// it runs in. RankSampler scans /proc every period on its own thread and
// records each process it saw (first and last sighting), and every sample in
// which one (job, rank) ran as two processes at once.
//
// Thread-safety: FindTrainers is safe from any thread. RankSampler's methods
// may be called from any thread while it samples.
#ifndef TESSERA_TESTS_FAULTS_RANK_CENSUS_H_
#define TESSERA_TESTS_FAULTS_RANK_CENSUS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/faults/netns_cluster.h"

namespace tessera::faults {

struct TrainerProcess {
  pid_t pid = 0;
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string node;  // whose namespace it runs in; empty if none of the cluster's
};

// Live (not zombie) trainer processes started with --coordinator=`coordinator`.
std::vector<TrainerProcess> FindTrainers(const NetnsCluster& net,
                                         const std::string& coordinator);

class RankSampler {
 public:
  struct Sighting {
    TrainerProcess process;
    absl::Time first_seen;
    absl::Time last_seen;
  };
  // One sample in which a (job, rank) ran as more than one process.
  struct Overlap {
    absl::Time at;
    std::vector<TrainerProcess> processes;
  };

  // Starts sampling at once. `net` is not owned and must outlive the sampler.
  RankSampler(const NetnsCluster* net, std::string coordinator,
              absl::Duration period = absl::Milliseconds(20));
  ~RankSampler();  // stops and joins the sampling thread
  RankSampler(const RankSampler&) = delete;
  RankSampler& operator=(const RankSampler&) = delete;

  // Every process seen so far, keyed by pid.
  std::map<pid_t, Sighting> Sightings() const;
  // The first kMaxOverlaps samples with an overlap, and how many there were.
  std::vector<Overlap> Overlaps() const;
  int64_t overlap_samples() const;
  // Time covered by samples with an overlap (each counts from the sample before).
  absl::Duration overlap_time() const;
  int64_t samples() const;
  // Waits until a sample taken after the call; returns its processes of `job_id`.
  std::vector<TrainerProcess> Fresh(int64_t job_id);

 private:
  void Loop();
  void SampleOnce();

  // Constant after construction.
  const NetnsCluster* const net_;  // Not owned.
  const std::string coordinator_;
  const absl::Duration period_;

  mutable absl::Mutex mu_;
  std::map<pid_t, Sighting> sightings_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxOverlaps = 50;
  std::vector<Overlap> overlaps_ ABSL_GUARDED_BY(mu_);
  int64_t overlap_samples_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration overlap_time_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sample_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<TrainerProcess> latest_ ABSL_GUARDED_BY(mu_);
  int64_t samples_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Notification stop_;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace tessera::faults

#endif  // TESSERA_TESTS_FAULTS_RANK_CENSUS_H_
