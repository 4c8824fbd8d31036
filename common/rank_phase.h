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
//
// "collective" is time spent waiting on other ranks; every other phase is the
// rank's own work. Plain C++, header-only; constants only.
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
};
inline constexpr int kRankPhaseCount = 9;

// Indexed by RankPhase.
inline constexpr std::array<const char*, kRankPhaseCount> kRankPhaseNames = {
    "startup",   "data",       "forward", "backward", "collective",
    "optimizer", "checkpoint", "eval",    "done"};

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
