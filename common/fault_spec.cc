#include "common/fault_spec.h"

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

// Longest fault text accepted (the spec's generic string limit is larger).
constexpr size_t kMaxFaultBytes = 256;

constexpr RankPhase kStepPhases[] = {RankPhase::kData, RankPhase::kForward,
                                     RankPhase::kBackward, RankPhase::kCollective,
                                     RankPhase::kOptimizer};
constexpr RankPhase kHangPhases[] = {RankPhase::kData,      RankPhase::kForward,
                                     RankPhase::kBackward,  RankPhase::kCollective,
                                     RankPhase::kOptimizer, RankPhase::kEval,
                                     RankPhase::kCheckpoint};

template <size_t N>
std::string PhaseList(const RankPhase (&phases)[N]) {
  std::vector<std::string> names;
  for (const RankPhase phase : phases) names.emplace_back(RankPhaseName(phase));
  return absl::StrJoin(names, ", ");
}

template <size_t N>
bool Contains(const RankPhase (&phases)[N], RankPhase phase) {
  for (const RankPhase p : phases) {
    if (p == phase) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text) {
  FaultSpec spec;
  if (text.empty()) return spec;
  const std::string quoted =
      text.size() > kMaxFaultBytes ? "fault" : absl::StrCat("fault \"", text, "\"");
  auto error = [&quoted](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(quoted, ": ", why,
                     " (expected hang:rank=R,step=N,phase=P or slow:rank=R,phase=P,ms=M, "
                     "optionally with ,attempt=A)"));
  };
  if (text.size() > kMaxFaultBytes) {
    return error(absl::StrCat("longer than ", kMaxFaultBytes, " bytes"));
  }
  for (const char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return error("holds a space");
  }
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return error("no kind (hang: or slow:)");
  const absl::string_view kind = text.substr(0, colon);
  if (kind == "hang") {
    spec.kind = FaultSpec::Kind::kHang;
  } else if (kind == "slow") {
    spec.kind = FaultSpec::Kind::kSlow;
  } else {
    return error(absl::StrCat("unknown kind '", kind, "'; use hang or slow"));
  }

  std::map<std::string, std::string, std::less<>> params;
  for (const absl::string_view part : absl::StrSplit(text.substr(colon + 1), ',')) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0 || eq + 1 == part.size()) {
      return error(absl::StrCat("'", part, "' is not key=value"));
    }
    const absl::string_view key = part.substr(0, eq);
    const bool known =
        key == "rank" || key == "phase" || key == "attempt" ||
        (spec.kind == FaultSpec::Kind::kHang ? key == "step" : key == "ms");
    if (!known) return error(absl::StrCat("unknown key '", key, "' for ", kind));
    if (!params.emplace(std::string(key), std::string(part.substr(eq + 1))).second) {
      return error(absl::StrCat("'", key, "' given twice"));
    }
  }

  // An integer parameter in [low, high]; missing is an error unless optional.
  auto integer = [&](absl::string_view key, int64_t low, int64_t high,
                     bool optional) -> absl::StatusOr<std::optional<int64_t>> {
    const auto it = params.find(key);
    if (it == params.end()) {
      if (optional) return std::optional<int64_t>();
      return error(absl::StrCat(kind, " needs ", key, "="));
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(it->second, &value) || value < low || value > high) {
      return error(absl::StrCat(key, " must be an integer in [", low, ", ", high,
                                "], got '", it->second, "'"));
    }
    return std::optional<int64_t>(value);
  };
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  absl::StatusOr<std::optional<int64_t>> rank = integer("rank", 0, kInt32Max, false);
  if (!rank.ok()) return rank.status();
  spec.rank = static_cast<int32_t>(**rank);
  absl::StatusOr<std::optional<int64_t>> attempt = integer("attempt", 1, kInt32Max, true);
  if (!attempt.ok()) return attempt.status();
  if (attempt->has_value()) spec.attempt = static_cast<int32_t>(**attempt);
  if (spec.kind == FaultSpec::Kind::kHang) {
    absl::StatusOr<std::optional<int64_t>> step =
        integer("step", 0, std::numeric_limits<int64_t>::max(), false);
    if (!step.ok()) return step.status();
    spec.step = **step;
  } else {
    absl::StatusOr<std::optional<int64_t>> ms = integer("ms", 1, kMaxFaultSlowMs, false);
    if (!ms.ok()) return ms.status();
    spec.ms = **ms;
  }

  const auto phase_it = params.find("phase");
  if (phase_it == params.end()) return error(absl::StrCat(kind, " needs phase="));
  const std::optional<RankPhase> phase = ParseRankPhase(phase_it->second);
  const bool hang = spec.kind == FaultSpec::Kind::kHang;
  if (!phase.has_value() ||
      !(hang ? Contains(kHangPhases, *phase) : Contains(kStepPhases, *phase))) {
    return error(absl::StrCat("phase must be one of ",
                              hang ? PhaseList(kHangPhases) : PhaseList(kStepPhases),
                              " for ", kind, ", got '", phase_it->second, "'"));
  }
  spec.phase = *phase;
  return spec;
}

std::string FormatFaultSpec(const FaultSpec& spec) {
  std::string text;
  switch (spec.kind) {
    case FaultSpec::Kind::kNone:
      return text;
    case FaultSpec::Kind::kHang:
      text = absl::StrCat("hang:rank=", spec.rank, ",step=", spec.step,
                          ",phase=", RankPhaseName(spec.phase));
      break;
    case FaultSpec::Kind::kSlow:
      text = absl::StrCat("slow:rank=", spec.rank, ",phase=", RankPhaseName(spec.phase),
                          ",ms=", spec.ms);
      break;
  }
  if (spec.attempt.has_value()) absl::StrAppend(&text, ",attempt=", *spec.attempt);
  return text;
}

}  // namespace tessera
