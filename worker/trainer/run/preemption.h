// Preemption: SIGUSR1 asks tessera-train to checkpoint now and exit with
// kTrainerExitPreempted (5, common/trainer_exit.h). The worker sends it when
// its worker is drained or gets a preemption notice (a Slurm-style SIGUSR1).
//
// The signal only sets a flag. The ranks of a job get it at different
// moments, so the training loop does not stop on the flag alone: each step,
// the ranks agree on whether any of them was asked to stop (the vote rides
// the step's gradient all-reduce; trainer.h), and all of them checkpoint at
// the same step and exit.
//
// The signal is taken on a thread of its own: PreemptionListener blocks
// SIGUSR1 in the thread that starts it (and so in every thread started after
// it, which inherit the mask) and waits for it with sigtimedwait. No compute
// thread is ever interrupted by it. That matters: with a plain handler, a
// signal that landed in JIT-compiled CPU code (AVX-512, no symbol; the
// trainer runs oneDNN and LibTorch kernels) found the stack pointer aimed at
// heap memory, the kernel pushed the signal frame there, and glibc aborted
// with "corrupted size vs. prev_size" in about a third of the trials, even
// with nothing acting on the flag. A handler that only sets the flag stays
// installed as well, for a thread that existed before the listener (a
// library's pool started while loading) and has the signal unblocked.
//
// Thread-safety: the flag is a lock-free atomic; the listener is started and
// destroyed by one thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_PREEMPTION_H_
#define TESSERA_WORKER_TRAINER_RUN_PREEMPTION_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::trainer {

// The process's preemption flag, set when SIGUSR1 arrives.
std::atomic<bool>& PreemptionRequested();

class PreemptionListener {
 public:
  // Installs the fallback handler, blocks SIGUSR1 in the calling thread and
  // starts the listening thread. Call it first thing in main, before other
  // threads start. Internal if a signal call fails.
  static absl::StatusOr<std::unique_ptr<PreemptionListener>> Start();

  // Stops the thread (within one poll interval) and joins it. SIGUSR1 stays
  // blocked in the calling thread.
  ~PreemptionListener();

  PreemptionListener(const PreemptionListener&) = delete;
  PreemptionListener& operator=(const PreemptionListener&) = delete;

  // How often the listening thread looks at its stop flag.
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(200);

 private:
  PreemptionListener() = default;
  void Loop();

  std::atomic<bool> stop_{false};
  std::thread thread_;  // Last: runs Loop().
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_PREEMPTION_H_
