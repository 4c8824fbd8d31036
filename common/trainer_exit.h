// Exit codes of tessera-train that the worker and the coordinator act on.
// tessera-train documents all of its codes in worker/trainer/main.cc.
#ifndef TESSERA_COMMON_TRAINER_EXIT_H_
#define TESSERA_COMMON_TRAINER_EXIT_H_

namespace tessera {

// The rank was asked to leave (SIGUSR1: a drain or a preemption notice). It
// checkpointed at a step every rank agreed on and exited; its job requeues
// without counting a restart.
inline constexpr int kTrainerExitPreempted = 5;

}  // namespace tessera

#endif  // TESSERA_COMMON_TRAINER_EXIT_H_
