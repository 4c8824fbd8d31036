// Preemption: SIGUSR1 asks tessera-train to checkpoint now and exit with
// kTrainerExitPreempted (5, common/trainer_exit.h). The worker sends it when
// its worker is drained or gets a preemption notice (a Slurm-style SIGUSR1).
//
// The handler only sets a flag (async-signal-safe). The ranks of a job get
// the signal at different moments, so the training loop does not stop on the
// flag alone: each step, the ranks agree on whether any of them was asked to
// stop (the vote rides the step's gradient all-reduce; trainer.h), and all of
// them checkpoint at the same step and exit.
//
// Plain C++. Thread-safe: the flag is a lock-free atomic.
#ifndef TESSERA_WORKER_TRAINER_PREEMPTION_H_
#define TESSERA_WORKER_TRAINER_PREEMPTION_H_

#include <atomic>

#include "absl/status/status.h"

namespace tessera::trainer {

// The process's preemption flag, set by the SIGUSR1 handler.
std::atomic<bool>& PreemptionRequested();

// Installs the SIGUSR1 handler that sets PreemptionRequested() (SA_RESTART,
// so that no blocking call of another thread fails with EINTR). Internal if
// sigaction fails.
absl::Status InstallPreemptionHandler();

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_PREEMPTION_H_
