// What a training rank is doing: the phases it reports with every lease
// renewal (tessera.v1.RankProgress.phase), as the trainer, the coordinator's
// watchdog and the fault-injection hook spell them.
//
//   startup     process start to the first step: data, rendezvous, model,
//               resume (and the broadcast of the initial parameters)
//   data        waiting for the next batch (loader threads, host-to-device copy)
//   forward     forward pass and loss
//   backward    backward pass (bucket all-reduces it overlaps run meanwhile)
//   collective  blocked on peers: the gradient buckets' all-reduce at the end
//               of backward, barriers, broadcasts, the evaluation's counts, the
//               per-step stop agreement when it is a collective of its own
//   optimizer   gradient clipping, loss scaling, the optimizer step
//   checkpoint  writing this rank's checkpoint files
//   eval        evaluating on the test split
//   done        training finished (or the rank was preempted); it is exiting
//   device      the host blocked waiting for its own device's queued work (a
//               .item(), the stop-agreement read, a synchronize); GPU ranks
//               only. The host runs ahead of a GPU, so this is where the
//               device work of forward, backward and the optimizer shows up on
//               the host, and where a rank waits for a collective its device
//               has queued.
//
// "collective" is time spent waiting on other ranks; "device" is waiting on
// this rank's device, which may itself wait on a collective (the report's
// collective and collective_ready say which: a ready collective means the
// rank waits on its peers, else on its own device work); every other phase
// is the rank's own work measured on the host. Plain C++, header-only;
// constants only.
#ifndef TESSERA_COMMON_RANK_PHASE_H_
#define TESSERA_COMMON_RANK_PHASE_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace tessera {

enum class RankPhase {
  kStartup = 0,
  kData,
  kForward,
  kBackward,
  kCollective,
  kOptimizer,
  kCheckpoint,
  kEval,
  kDone,
  kDevice,  // last, so that the earlier phases keep their numbers
};
inline constexpr int kRankPhaseCount = 10;

// Indexed by RankPhase.
inline constexpr std::array<const char*, kRankPhaseCount> kRankPhaseNames = {
    "startup",   "data",       "forward", "backward", "collective",
    "optimizer", "checkpoint", "eval",    "done",     "device"};

constexpr const char* RankPhaseName(RankPhase phase) {
  return kRankPhaseNames[static_cast<size_t>(phase)];
}

// The phase spelled `name`; nullopt for anything else.
constexpr std::optional<RankPhase> ParseRankPhase(std::string_view name) {
  for (size_t i = 0; i < kRankPhaseNames.size(); ++i) {
    if (std::string_view(kRankPhaseNames[i]) == name) return static_cast<RankPhase>(i);
  }
  return std::nullopt;
}

}  // namespace tessera

#endif  // TESSERA_COMMON_RANK_PHASE_H_
