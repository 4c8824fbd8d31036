#include "common/fault_spec.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
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

// Parses one non-empty fault text; each step returns the first error it finds,
// in the order the grammar is read: size, spaces, kind, keys, numbers, phase.
class FaultParser {
 public:
  explicit FaultParser(absl::string_view text)
      : text_(text),
        quoted_(text.size() > kMaxFaultBytes ? "fault"
                                             : absl::StrCat("fault \"", text, "\"")) {}

  absl::StatusOr<FaultSpec> Parse() {
    FaultSpec spec;
    if (absl::Status s = CheckText(); !s.ok()) return s;
    if (absl::Status s = ParseKind(&spec); !s.ok()) return s;
    if (absl::Status s = ParseParams(spec.kind); !s.ok()) return s;
    if (absl::Status s = ParseNumbers(&spec); !s.ok()) return s;
    if (absl::Status s = ParsePhase(&spec); !s.ok()) return s;
    return spec;
  }

 private:
  absl::Status Error(absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat(quoted_, ": ", why,
                     " (expected hang:rank=R,step=N,phase=P or slow:rank=R,phase=P,ms=M, "
                     "optionally with ,attempt=A)"));
  }

  absl::Status CheckText() const {
    if (text_.size() > kMaxFaultBytes) {
      return Error(absl::StrCat("longer than ", kMaxFaultBytes, " bytes"));
    }
    for (const char c : text_) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c)))
        return Error("holds a space");
    }
    return absl::OkStatus();
  }

  absl::Status ParseKind(FaultSpec* spec) {
    colon_ = text_.find(':');
    if (colon_ == absl::string_view::npos) return Error("no kind (hang: or slow:)");
    kind_ = text_.substr(0, colon_);
    if (kind_ == "hang") {
      spec->kind = FaultSpec::Kind::kHang;
    } else if (kind_ == "slow") {
      spec->kind = FaultSpec::Kind::kSlow;
    } else {
      return Error(absl::StrCat("unknown kind '", kind_, "'; use hang or slow"));
    }
    return absl::OkStatus();
  }

  // The key=value list after the kind: known keys only, each at most once.
  absl::Status ParseParams(FaultSpec::Kind kind) {
    for (const absl::string_view part : absl::StrSplit(text_.substr(colon_ + 1), ',')) {
      const size_t eq = part.find('=');
      if (eq == absl::string_view::npos || eq == 0 || eq + 1 == part.size()) {
        return Error(absl::StrCat("'", part, "' is not key=value"));
      }
      const absl::string_view key = part.substr(0, eq);
      const bool known = key == "rank" || key == "phase" || key == "attempt" ||
                         (kind == FaultSpec::Kind::kHang ? key == "step" : key == "ms");
      if (!known) return Error(absl::StrCat("unknown key '", key, "' for ", kind_));
      if (!params_.emplace(std::string(key), std::string(part.substr(eq + 1))).second) {
        return Error(absl::StrCat("'", key, "' given twice"));
      }
    }
    return absl::OkStatus();
  }

  // An integer parameter in [low, high]; missing is an error unless optional.
  absl::StatusOr<std::optional<int64_t>> Integer(absl::string_view key, int64_t low,
                                                 int64_t high, bool optional) const {
    const auto it = params_.find(key);
    if (it == params_.end()) {
      if (optional) return std::optional<int64_t>();
      return Error(absl::StrCat(kind_, " needs ", key, "="));
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(it->second, &value) || value < low || value > high) {
      return Error(absl::StrCat(key, " must be an integer in [", low, ", ", high,
                                "], got '", it->second, "'"));
    }
    return std::optional<int64_t>(value);
  }

  // rank, then attempt, then step (hang) or ms (slow).
  absl::Status ParseNumbers(FaultSpec* spec) const {
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    absl::StatusOr<std::optional<int64_t>> rank = Integer("rank", 0, kInt32Max, false);
    if (!rank.ok()) return rank.status();
    spec->rank = static_cast<int32_t>(**rank);
    absl::StatusOr<std::optional<int64_t>> attempt =
        Integer("attempt", 1, kInt32Max, true);
    if (!attempt.ok()) return attempt.status();
    if (attempt->has_value()) spec->attempt = static_cast<int32_t>(**attempt);
    if (spec->kind == FaultSpec::Kind::kHang) {
      absl::StatusOr<std::optional<int64_t>> step =
          Integer("step", 0, std::numeric_limits<int64_t>::max(), false);
      if (!step.ok()) return step.status();
      spec->step = **step;
    } else {
      absl::StatusOr<std::optional<int64_t>> ms =
          Integer("ms", 1, kMaxFaultSlowMs, false);
      if (!ms.ok()) return ms.status();
      spec->ms = **ms;
    }
    return absl::OkStatus();
  }

  absl::Status ParsePhase(FaultSpec* spec) const {
    const auto phase_it = params_.find("phase");
    if (phase_it == params_.end()) return Error(absl::StrCat(kind_, " needs phase="));
    const std::optional<RankPhase> phase = ParseRankPhase(phase_it->second);
    const bool hang = spec->kind == FaultSpec::Kind::kHang;
    if (!phase.has_value() ||
        !(hang ? Contains(kHangPhases, *phase) : Contains(kStepPhases, *phase))) {
      return Error(absl::StrCat("phase must be one of ",
                                hang ? PhaseList(kHangPhases) : PhaseList(kStepPhases),
                                " for ", kind_, ", got '", phase_it->second, "'"));
    }
    spec->phase = *phase;
    return absl::OkStatus();
  }

  const absl::string_view text_;
  const std::string quoted_;  // how messages name the text
  size_t colon_ = 0;          // where the kind ends
  absl::string_view kind_;    // "hang" or "slow" once ParseKind succeeds
  std::map<std::string, std::string, std::less<>> params_;
};

}  // namespace

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text) {
  if (text.empty()) return FaultSpec();
  return FaultParser(text).Parse();
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
