// Exit codes of tessera-train that the worker and the coordinator act on, and
// the line a rank prints to say why it failed. tessera-train documents all of
// its codes in worker/trainer/main.cc.
//
// A rank that fails for a reason it can name prints one line
//   tessera-train: exit reason: <reason>
// just before it exits; the worker reads the last such line from the tail of
// the rank's log (worker/exit_detail.h) and the coordinator puts it in the
// rank's exit reason next to what the code means (TrainerExitMeaning).
#ifndef TESSERA_COMMON_TRAINER_EXIT_H_
#define TESSERA_COMMON_TRAINER_EXIT_H_

#include <string_view>

namespace tessera {

// Every exit code of tessera-train, by name (worker/trainer/main.cc and the
// modules that end the process use these names, never the numbers).
inline constexpr int kTrainerExitSuccess = 0;

// A runtime failure (the reason on stderr).
inline constexpr int kTrainerExitFailure = 1;

// Bad flags or options: the usage error is on stderr; rerunning cannot help.
inline constexpr int kTrainerExitUsage = 2;

// The coordinator's lease ran out (worker/trainer/run/lease.h): the rank
// fenced itself off at once, so that a replacement can take its place.
inline constexpr int kTrainerExitLeaseLost = 3;

// A collective failed or timed out: the collective timeout aborted the communicator
// (worker/trainer/dist/collective_timeout.h).
inline constexpr int kTrainerExitCollectiveFailure = 4;

// The rank was asked to leave (SIGUSR1: a drain or a preemption notice). It
// checkpointed at a step every rank agreed on and exited; its job requeues
// without counting a restart.
inline constexpr int kTrainerExitPreempted = 5;

// A CUDA error outside NCCL: a kernel fault such as an illegal address (the
// device context is unusable from then on), or the device ran out of memory.
inline constexpr int kTrainerExitCudaError = 6;

inline constexpr std::string_view kTrainerExitReasonPrefix =
    "tessera-train: exit reason: ";

// What exit code `code` of tessera-train means; empty for codes without a
// meaning of their own (success, a runtime failure and any other).
constexpr std::string_view TrainerExitMeaning(int code) {
  switch (code) {
    case kTrainerExitUsage:
      return "usage error";
    case kTrainerExitLeaseLost:
      return "lost the coordinator's lease";
    case kTrainerExitCollectiveFailure:
      return "a collective failed or timed out";
    case kTrainerExitPreempted:
      return "preempted";
    case kTrainerExitCudaError:
      return "CUDA error";
    default:
      return {};
  }
}

}  // namespace tessera

#endif  // TESSERA_COMMON_TRAINER_EXIT_H_
