// What this rank is doing, for the progress report that rides every lease
// renewal (tessera.v1.RankProgress; lease.h): the optimizer steps completed
// (counted from the job's start, so a resumed run goes on from its
// checkpoint), the current phase (common/rank_phase.h) and for how long, the
// collective it waits on and whether that collective's inputs are ready, the
// mean time per step spent in each phase over the last `window_steps` steps,
// and on a GPU the device's own time per step in each phase.
//
// The training loop calls Enter(phase) at every phase change and brackets each
// optimizer step with BeginStep / EndStep; the lease thread calls Snapshot.
// Time between BeginStep and EndStep accrues to the phase it was spent in;
// time outside a step (start-up, evaluation, checkpoints and their
// collectives) is reported as the current phase but belongs to no step, so the
// step time is the training work alone and equals the sum of the phase means.
// "collective" is time blocked on peers: a slow rank shows more time in its own
// phases and its peers more in "collective".
//
// Times are host wall-clock times. On a GPU the device work runs behind the
// host, so it shows up where the host waits for it: the trainer reports
// "device" around its reads of device values, and the collective named there
// (with collective_ready) tells waiting on peers from waiting on its own
// kernels. A GPU's own work per step comes from its step timer's events
// instead (SetDeviceStepTimes), which the coordinator compares across ranks.
//
// Cost: Enter, BeginStep and EndStep each read the clock once and take one
// uncontended mutex (measured in progress_test: well under a microsecond).
// Thread-safe: one training thread updates, any thread reads.
#ifndef TESSERA_WORKER_TRAINER_RUN_PROGRESS_H_
#define TESSERA_WORKER_TRAINER_RUN_PROGRESS_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/rank_phase.h"
#include "worker/trainer/dist/pending_collective_tracker.h"

namespace tessera::trainer {

// The fields of tessera.v1.RankProgress, without protobuf.
struct ProgressReport {
  int64_t step = 0;   // optimizer steps completed, from the job's start
  std::string phase;  // RankPhaseName of the current phase
  // In "collective" and "device": the oldest unfinished collective, e.g.
  // "allreduce #412 (bucket 3)"; empty when none is pending.
  std::string collective;
  // `collective` is named and its inputs are complete (the rank waits on its
  // peers); false while its own device work still produces them.
  bool collective_ready = false;
  int64_t phase_elapsed_ms = 0;
  double step_time_ms = 0;  // mean over the window; 0 before the first step ends
  // Mean ms per step in each phase that took time in the window, in RankPhase
  // order; they add up to step_time_ms.
  std::vector<std::pair<std::string, double>> phase_ms;
  int32_t window_steps = 0;  // steps the means cover
  // Units of work done in the current phase (eval: test batches), so that a
  // long evaluation shows progress to the coordinator's stall check.
  int64_t phase_items = 0;
  // GPU ranks: mean device ms per step in each step-timer phase ("data",
  // "forward", "backward", "comm", "optimizer"), over device_window_steps
  // steps, as last set by SetDeviceStepTimes; empty on CPU ranks.
  std::vector<std::pair<std::string, double>> device_phase_ms;
  int32_t device_window_steps = 0;
};

struct ProgressTrackerOptions {
  // Steps the means cover. 20 steps are one to a few seconds of a small CPU
  // job and tens of seconds of a large GPU one: recent enough to show a rank
  // that just slowed down, long enough to smooth out a single slow batch.
  int window_steps = 20;
};

class ProgressTracker {
 public:
  // `clock` must outlive the tracker. Starts in "startup" at step 0.
  explicit ProgressTracker(const Clock& clock, ProgressTrackerOptions options = {});

  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  // The communicator's collectives, named in reports while in "collective"
  // or "device".
  // Null (the default): none named. The tracker must stay alive until it is
  // reset to null (Snapshot reads it under the tracker's lock, so resetting
  // waits for a Snapshot in progress).
  void SetCollectives(const PendingCollectiveTracker* collectives);

  // The device's own mean time per step in each phase (ms), measured between
  // events on the compute stream over the last `steps` steps; reported as
  // they are until the next call. Only a rank whose step timer measures
  // device time calls it.
  void SetDeviceStepTimes(std::vector<std::pair<std::string, double>> ms_per_step,
                          int32_t steps);

  // Steps completed before this run's first step (the resumed checkpoint's).
  void SetStep(int64_t completed_steps);

  // The rank enters `phase` now. Entering the current phase again changes
  // nothing (its elapsed time keeps counting).
  void Enter(RankPhase phase);

  // An optimizer step begins now (in the current phase).
  void BeginStep();
  // The step ends now; `completed_steps` steps are done.
  void EndStep(int64_t completed_steps);

  // One unit of work of the current phase is done (an eval batch); the count
  // restarts at each phase change.
  void AddPhaseItem();

  ProgressReport Snapshot() const;

  RankPhase phase() const;
  int64_t step() const;

 private:
  using PhaseTimes = std::array<absl::Duration, kRankPhaseCount>;

  // Adds the time since the last accrual to the current phase of the step.
  void AccrueLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Clock& clock_;  // Not owned.
  const ProgressTrackerOptions options_;

  mutable absl::Mutex mu_;
  const PendingCollectiveTracker* collectives_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::pair<std::string, double>> device_ms_ ABSL_GUARDED_BY(mu_);
  int32_t device_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  RankPhase phase_ ABSL_GUARDED_BY(mu_) = RankPhase::kStartup;
  absl::Time phase_since_ ABSL_GUARDED_BY(mu_);
  int64_t phase_items_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_step_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time step_start_ ABSL_GUARDED_BY(mu_);
  absl::Time accrued_until_ ABSL_GUARDED_BY(mu_);
  PhaseTimes current_ ABSL_GUARDED_BY(mu_){};
  // The last window_steps steps: per-phase times and wall times, as rings,
  // with their running sums (absl::Duration sums are exact).
  std::vector<PhaseTimes> window_phases_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> window_steps_ ABSL_GUARDED_BY(mu_);
  size_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  PhaseTimes sum_phases_ ABSL_GUARDED_BY(mu_){};
  absl::Duration sum_steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_PROGRESS_H_
