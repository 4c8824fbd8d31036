// The ranks' agreement on when to stop for a preemption (trainer.h,
// preemption.h): each step, every rank votes 1 when it was asked to stop, and
// all of them learn the sum at the same step, so all stop after the same
// step however far apart the signal reached them.
//
// How the vote travels depends on the run:
//   - gradient all-reduce on, CPU: the reducer's control word (reducer.h),
//     summed by the step's bucket all-reduce at no collective of its own and
//     read right after it;
//   - gradient all-reduce on, CUDA: the same word, copied to pinned host
//     memory after the all-reduce and read one step later, so the host never
//     waits on the device for it (the ranks then stop one step after the vote);
//   - several ranks without gradient all-reduce: a one-element all-reduce of
//     its own every step;
//   - a world of one: the rank's own flag.
//
// Per step: Vote() before the synchronizing backward pass (after the previous
// step's ZeroGradients), Decide() after FinishBackward. Not thread-safe: the
// training thread owns it; the flag may be set from any thread.
#ifndef TESSERA_WORKER_TRAINER_DIST_STOP_AGREEMENT_H_
#define TESSERA_WORKER_TRAINER_DIST_STOP_AGREEMENT_H_

#include <c10/core/Device.h>

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/reducer.h"

namespace tessera::trainer {

class StopAgreement {
 public:
  // `requested` null: the agreement is off and Decide always answers false
  // (every rank of a job must have a flag, or none). All references must
  // outlive the agreement.
  StopAgreement(const std::atomic<bool>* requested, Reducer& reducer,
                Communicator& communicator, bool gradients_synchronized,
                const c10::Device& device);
  ~StopAgreement();

  StopAgreement(const StopAgreement&) = delete;
  StopAgreement& operator=(const StopAgreement&) = delete;

  // Puts this rank's vote in the control word when its flag is up.
  void Vote();

  // Whether the ranks agreed to stop after this step; the same answer on every
  // rank. A collective's error in the own-collective mode.
  absl::StatusOr<bool> Decide();

 private:
  enum class Mode { kOff, kAlone, kControlWord, kControlWordLagged, kOwnCollective };
  struct LaggedRead;  // the pinned host copy and its CUDA event; in the .cc

  bool Requested() const;

  const std::atomic<bool>* const requested_;  // Not owned.
  Reducer& reducer_;                          // Not owned.
  Communicator& communicator_;                // Not owned.
  const Mode mode_;
  const c10::Device device_;
  std::unique_ptr<LaggedRead> lagged_;  // kControlWordLagged only
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_STOP_AGREEMENT_H_
