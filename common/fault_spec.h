// The trainer's fault-injection test hook (TrainerConfig.fault, tessera-train
// --fault): makes one rank misbehave so that tests can show the coordinator's
// watchdog at work. Off when empty; never meant for real jobs.
//
// Grammar (no spaces; keys in any order, each at most once):
//   hang:rank=R,step=N,phase=P[,attempt=A]
//       Rank R, once it has completed N optimizer steps (counted from the
//       job's start) and enters phase P, blocks there for good while its other
//       threads (the lease renewal that carries its progress reports among
//       them) run on: the alive-but-stuck rank. P is one of data, forward,
//       backward, collective, optimizer (during step N+1), eval or
//       checkpoint (the evaluation or checkpoint after step N, if one is due).
//   slow:rank=R,phase=P,ms=M[,attempt=A]
//       Rank R sleeps M ms (1 to 600000) more in phase P once every step, P
//       one of data, forward, backward, collective, optimizer: a straggler.
//   attempt=A (A >= 1) limits the fault to that attempt of the job, so that a
//   restarted attempt runs clean; without it every attempt misbehaves.
//
// Parsed by the spec validation (common/job_spec.cc, which also checks R
// against the world size) and by tessera-train. absl only; thread-safe free
// functions.
#ifndef TESSERA_COMMON_FAULT_SPEC_H_
#define TESSERA_COMMON_FAULT_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rank_phase.h"

namespace tessera {

struct FaultSpec {
  enum class Kind { kNone, kHang, kSlow };
  Kind kind = Kind::kNone;
  int32_t rank = 0;
  RankPhase phase = RankPhase::kData;
  int64_t step = 0;                // hang: completed steps before it hangs
  int64_t ms = 0;                  // slow: extra milliseconds per step
  std::optional<int32_t> attempt;  // only this attempt; unset: every attempt

  bool enabled() const { return kind != Kind::kNone; }
  // Whether the fault applies to this rank of this attempt.
  bool AppliesTo(int32_t this_rank, int32_t this_attempt) const {
    return enabled() && rank == this_rank &&
           (!attempt.has_value() || *attempt == this_attempt);
  }
};

// Longest extra delay a "slow" fault may ask for.
inline constexpr int64_t kMaxFaultSlowMs = 600000;

// Parses the grammar above; empty text is no fault. InvalidArgument naming the
// offending part, e.g. "fault \"hang:rank=1,phase=data\": hang needs step=N".
absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text);

// The canonical spelling of `spec` ("" when none), which ParseFaultSpec reads
// back to the same spec.
std::string FormatFaultSpec(const FaultSpec& spec);

}  // namespace tessera

#endif  // TESSERA_COMMON_FAULT_SPEC_H_
