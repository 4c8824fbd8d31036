// RankWatch: the coordinator's watch over the ranks of one running attempt
// (users set it with a spec's watchdog: block and --no-watchdog), fed by the
// progress reports its ranks send with every lease renewal (about every 2 s;
// RankProgress in tessera.proto).
//
// It answers three questions, all from reports and the injected times:
//   * Unresponsive rank: a running rank sent no report for rank_silent_after
//     (its whole process is stopped or wedged; SIGSTOP is the test).
//   * Stalled attempt: no rank's (step, phase) moved for
//     max(stall_after_min, stall_step_factor x the median step time), although
//     reports keep arriving (a rank alive but stuck: an NFS read, a deadlock).
//     The culprit is the rank that is NOT waiting on its peers while its
//     peers are, else the rank(s) at the lowest step. A rank waits on its
//     peers in "collective", and in "device" (its host blocked on its GPU)
//     when its report names a collective whose inputs are ready
//     (collective_ready); in "device" without one, its own device work is
//     what it waits for, so a GPU rank whose kernel hangs is named, not every
//     rank at the lowest step. A rank in "done" (training finished; it
//     flushes its metrics and reports its result, which may wait on a
//     failing store) is never a stall and is left out of this rule.
//   * Straggler: a rank whose own work per step stays above straggler_ratio x
//     the median of its peers' for straggler_window. Own work is, when every
//     rank compared reports device times (GPU ranks: device_phase_ms), the
//     device's phases less "comm"; else the host's step time less the time it
//     waited on peers ("collective") or on its device ("device"), which on a
//     GPU is where the device work shows up, alike on slow and fast ranks.
//     Flagging does not stop anything; an episode ends when the ratio stays
//     below halfway to 1 for straggler_window too.
//
// The verdict's reason names the culprit, its worker, step and phase, and what
// its peers wait on, e.g. "rank 1 on w2 stalled at step 412 in data for 64 s;
// rank 0 waiting on allreduce #830 (bucket 3) for 64 s".
//
// Plain C++ over absl and the protobuf messages. Thread-safety: none; the
// JobManager's mutex guards it with the job it belongs to.
#ifndef TESSERA_COORDINATOR_CORE_RANK_WATCH_H_
#define TESSERA_COORDINATOR_CORE_RANK_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// The coordinator's thresholds (flags of the same names); a job's
// WatchdogSpec overrides them (RankWatchFor).
struct RankWatchOptions {
  bool enabled = true;
  // --rank-silent-after: no progress report from a running rank for this long.
  absl::Duration rank_silent_after = absl::Seconds(20);
  // --stall-after-min: the floor of the stall threshold.
  absl::Duration stall_after_min = absl::Seconds(60);
  // --stall-step-factor: k in max(stall_after_min, k x median step time).
  double stall_step_factor = 10;
  // --straggler-ratio: own work per step above this x the peers' median.
  double straggler_ratio = 1.3;
  // --straggler-window: ... for at least this long.
  absl::Duration straggler_window = absl::Seconds(30);
  // Reports covering fewer steps than this are not compared.
  int32_t straggler_min_steps = 3;
};

// `defaults` with the fields the job's spec sets.
RankWatchOptions RankWatchFor(const RankWatchOptions& defaults,
                              const tessera::v1::WatchdogSpec& spec);

// Why an attempt must end.
struct WatchVerdict {
  enum class Kind { kUnresponsive, kStalled };
  Kind kind = Kind::kStalled;
  std::vector<int32_t> culprits;  // ranks, ascending
  std::string reason;
};

class RankWatch {
 public:
  // `workers[r]` is where rank r runs; silence counts from `start` (when the
  // attempt began running, or when a restarted coordinator adopted it).
  RankWatch(std::vector<std::string> workers, absl::Time start);

  // Records rank `rank`'s report, received at `now`. Out-of-range ranks are
  // ignored.
  void Report(int32_t rank, const tessera::v1::RankProgress& progress, absl::Time now);

  // Whether the attempt must end at `now`; `running[r]` says whether rank r
  // still runs (exited ranks send no reports and are not judged).
  std::optional<WatchVerdict> Check(absl::Time now, const RankWatchOptions& options,
                                    const std::vector<bool>& running) const;

  // Re-evaluates the straggler flags at `now`; returns the description of
  // each rank flagged by this call (a new episode), to be recorded once.
  std::vector<std::string> UpdateStragglers(absl::Time now,
                                            const RankWatchOptions& options,
                                            const std::vector<bool>& running);

  // The ranks flagged now, described as UpdateStragglers did (numbers as of
  // the last update).
  std::vector<std::string> Stragglers() const;
  bool IsStraggler(int32_t rank) const;

  // Rank `rank`'s last report and when it arrived; nullptr before the first.
  const tessera::v1::RankProgress* Progress(int32_t rank) const;
  absl::Time ReceivedAt(int32_t rank) const;

  // The highest step any rank reported (0 before any report).
  int64_t MaxStep() const;

 private:
  // Check's two verdicts: ranks silent past rank_silent_after; no rank moved
  // for the stall threshold.
  std::optional<WatchVerdict> CheckSilent(absl::Time now, const RankWatchOptions& options,
                                          const std::vector<bool>& running) const;
  std::optional<WatchVerdict> CheckStalled(absl::Time now,
                                           const RankWatchOptions& options,
                                           const std::vector<bool>& running) const;
  struct RankState {
    bool reported = false;
    tessera::v1::RankProgress last;
    absl::Time received = absl::InfinitePast();
    absl::Time slow_since = absl::InfiniteFuture();  // above the ratio since
    absl::Time fast_since = absl::InfiniteFuture();  // below the release ratio since
    bool flagged = false;
    std::string text;  // the straggler description while flagged
  };

  // How long rank r has been in its reported phase, as of `now`.
  absl::Duration PhaseAge(const RankState& r, absl::Time now) const;
  // UpdateStragglers' steps: the running ranks whose last report covers
  // enough steps to compare; and rank state `s`'s straggler episode moved on
  // to `now` for its work `ratio` to its peers' median (slow since, fast since,
  // unflagged after a window below the release ratio).
  std::vector<int32_t> ComparableRanks(const RankWatchOptions& options,
                                       const std::vector<bool>& running) const;
  static void UpdateEpisode(RankState& s, double ratio, absl::Time now,
                            const RankWatchOptions& options);
  // "rank 1 on w2"
  std::string Name(int32_t rank) const;
  // "; rank 0 waiting on allreduce #830 (bucket 3) for 64 s" for the ranks in
  // `waiting`, grouped when they wait on the same collective.
  std::string WaitingText(const std::vector<int32_t>& waiting, absl::Time now) const;

  std::vector<std::string> workers_;
  absl::Time start_;
  absl::Time last_move_;  // last time any rank's (step, phase) changed
  std::vector<RankState> ranks_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_RANK_WATCH_H_
