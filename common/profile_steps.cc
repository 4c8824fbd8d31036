#include "common/profile_steps.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tessera {

absl::StatusOr<ProfileSteps> ParseProfileSteps(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '-');
  ProfileSteps steps;
  const bool parsed =
      (parts.size() == 1 || parts.size() == 2) &&
      absl::SimpleAtoi(parts[0], &steps.first) &&
      absl::SimpleAtoi(parts.size() == 2 ? parts[1] : parts[0], &steps.last);
  if (!parsed || steps.first < 1 || steps.last < steps.first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile steps must be A-B with 1 <= A <= B (optimizer steps, counted "
        "from 1), or one step N; got \"",
        text, "\""));
  }
  return steps;
}

}  // namespace tessera
