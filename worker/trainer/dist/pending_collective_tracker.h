// Which collectives of one communicator are under way, and since when.
//
// A backend calls Begin when it issues a collective and End once the collective
// has finished (NCCL: its `done` event completed; Gloo: it was waited for).
// Begin numbers collectives 1, 2, 3, ... in issue order; every rank issues the
// same collectives in the same order, so "allreduce #412" names the same
// operation on every rank, and a rank stuck at a lower number than its peers is
// the one that fell behind. Oldest() is what a collective timeout ages
// (collective_timeout.h) and what a rank reports as its phase.
//
// Plain C++ (no LibTorch, no CUDA). Thread-safe: a backend's issuing thread,
// its completion poller and any reader may call it concurrently.
#ifndef TESSERA_WORKER_TRAINER_DIST_PENDING_COLLECTIVE_TRACKER_H_
#define TESSERA_WORKER_TRAINER_DIST_PENDING_COLLECTIVE_TRACKER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tessera::trainer {

// The bucket of a collective that carries no gradient bucket (a barrier, a
// broadcast, the test-set counts).
inline constexpr int kNoBucket = -1;

struct PendingCollectiveInfo {
  uint64_t sequence = 0;   // 1 for the communicator's first collective, ...
  std::string name;        // "allreduce", "broadcast", "barrier"
  int bucket = kNoBucket;  // the gradient bucket it carries, or kNoBucket
  absl::Time started_at;   // when it was issued, on the tracker's clock
  // Its inputs are complete: it runs or waits on peers. False while the
  // rank's own device work that produces them is still queued or running (an
  // NCCL collective before its `ready` event completed); a rank whose oldest
  // collective is not ready waits on itself, not on its peers.
  bool ready = true;
};

// "allreduce #412 (bucket 3)", or "barrier #7" without a bucket.
std::string DescribeCollective(const PendingCollectiveInfo& info);

class PendingCollectiveTracker {
 public:
  // `clock` must outlive the tracker.
  explicit PendingCollectiveTracker(const Clock& clock) : clock_(clock) {}

  PendingCollectiveTracker(const PendingCollectiveTracker&) = delete;
  PendingCollectiveTracker& operator=(const PendingCollectiveTracker&) = delete;

  // Records a collective issued now; returns its sequence number. `ready`:
  // its inputs are complete already (host collectives); a device backend
  // passes false and calls MarkReady once the device has produced them.
  uint64_t Begin(absl::string_view name, int bucket = kNoBucket, bool ready = true);

  // The inputs of collective `sequence` are complete (nothing if it ended).
  void MarkReady(uint64_t sequence);

  // The collective `sequence` has finished. Ending one twice, or one never
  // begun, does nothing, so that a completion poller and a waiter may both
  // report the same collective.
  void End(uint64_t sequence);

  // The unfinished collective issued first; nullopt when none is pending.
  std::optional<PendingCollectiveInfo> Oldest() const;

  // Every unfinished collective, oldest first.
  std::vector<PendingCollectiveInfo> Pending() const;

  // Collectives begun so far (the last sequence number handed out).
  uint64_t issued() const;

 private:
  const Clock& clock_;  // Not owned.

  mutable absl::Mutex mu_;
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  // Keyed by sequence number: iteration order is issue order.
  std::map<uint64_t, PendingCollectiveInfo> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_PENDING_COLLECTIVE_TRACKER_H_
