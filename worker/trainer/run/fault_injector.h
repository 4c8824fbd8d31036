// The trainer side of the fault-injection test hook (--fault; grammar in
// common/fault_spec.h): the training loop tells the injector every phase it
// enters, and the injector makes the chosen rank hang or dawdle there.
//
// A hang blocks the calling (training) thread for good and nothing else: the
// lease thread keeps renewing and so keeps reporting the step and the phase it
// hangs in, which is the alive-but-stuck rank the coordinator's rank watch must
// find. A slow fault sleeps once per step, on the first entry into its phase.
//
// Plain C++ (no LibTorch). Not thread-safe: the training thread owns it.
#ifndef TESSERA_WORKER_TRAINER_RUN_FAULT_INJECTOR_H_
#define TESSERA_WORKER_TRAINER_RUN_FAULT_INJECTOR_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "common/fault_spec.h"
#include "common/rank_phase.h"

namespace tessera::trainer {

struct FaultInjectorOptions {
  // How a slow fault waits.
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
  // How a hang blocks; the default never returns. Tests record and return.
  std::function<void()> hang = [] {
    for (;;) absl::SleepFor(absl::Hours(1));
  };
  // One line when the fault takes effect (a hang, or the first slow step).
  std::function<void(const std::string&)> log;
};

class FaultInjector {
 public:
  // `spec` as parsed from --fault; it acts only when it names this rank (and
  // this attempt, if it names one).
  FaultInjector(const FaultSpec& spec, int32_t rank, int32_t attempt,
                FaultInjectorOptions options = {});

  // Whether the fault applies to this rank of this attempt at all.
  bool active() const { return active_; }

  // The rank enters `phase` with `completed_steps` optimizer steps done.
  void OnPhase(RankPhase phase, int64_t completed_steps) {
    if (active_ && phase == spec_.phase) Act(completed_steps);
  }

 private:
  void Act(int64_t completed_steps);

  const FaultSpec spec_;
  const int32_t rank_;
  const bool active_;
  const FaultInjectorOptions options_;
  int64_t slowed_at_ = -1;  // the step a slow fault last slept in
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_FAULT_INJECTOR_H_
