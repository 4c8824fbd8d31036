// The phase a rank's training reports (progress.h, common/rank_phase.h), and
// its waits on its own device. On a CUDA device the host runs ahead of the
// GPU, so a read of a device value (a .item(), a copy to the host, an event
// wait) blocks until the rank's queued work is done: ReadFromDevice reports
// that wait as "device", then the interrupted phase again. That is where the
// device's forward, backward and optimizer work shows up, and where the
// collective it has queued tells waiting on peers from waiting on itself.
// Reading CPU tensors waits for nothing, so a CPU rank reports no such phase.
//
// Use: one reporter per run, made with the run's ProgressTracker (or none);
// set_device_waits once the rank's placement is known; Report at every phase
// change; wrap every read of a device value in ReadFromDevice.
//
// Thread-safety: one thread, the training loop's, uses a reporter.
#ifndef TESSERA_WORKER_TRAINER_RUN_PHASE_REPORTER_H_
#define TESSERA_WORKER_TRAINER_RUN_PHASE_REPORTER_H_

#include "common/rank_phase.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {

class PhaseReporter {
 public:
  // `progress` null: nothing is reported, and phase() still follows. Not owned.
  explicit PhaseReporter(ProgressTracker* progress) : progress_(progress) {}
  PhaseReporter(const PhaseReporter&) = delete;
  PhaseReporter& operator=(const PhaseReporter&) = delete;

  // Whether reads of device values wait on a CUDA device (false: the CPU,
  // whose reads are not reported).
  void set_device_waits(bool waits) { device_waits_ = waits; }

  // The rank is in `phase` from now on.
  void Report(RankPhase phase);
  // The phase reported last (kStartup before any).
  RankPhase phase() const { return phase_; }
  // One unit of work of the current phase is done (ProgressTracker::AddPhaseItem).
  void AddPhaseItem();
  // The tracker reported to; null: none.
  ProgressTracker* progress() const { return progress_; }

  // Returns read(), reported as "device" while it runs when reads wait on a
  // CUDA device; the interrupted phase is reported again after it.
  template <typename Read>
  auto ReadFromDevice(Read&& read) -> decltype(read()) {
    if (!device_waits_) return read();
    const RankPhase interrupted = phase_;
    Report(RankPhase::kDevice);
    auto value = read();
    Report(interrupted);
    return value;
  }

 private:
  ProgressTracker* const progress_;  // Not owned; null: none.
  bool device_waits_ = false;
  RankPhase phase_ = RankPhase::kStartup;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_PHASE_REPORTER_H_
