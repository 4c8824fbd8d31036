// The window of a step profile (`trainer.profile_steps`, tessera-train's
// --profile-steps): "A-B" records the optimizer steps A to B, counted from 1
// as the log and the metrics count them; "N" alone is N-N. Parsed here once,
// for the job spec's check and for the trainer.
#ifndef TESSERA_COMMON_PROFILE_STEPS_H_
#define TESSERA_COMMON_PROFILE_STEPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

struct ProfileSteps {
  int64_t first = 0;
  int64_t last = 0;
  int64_t count() const { return last - first + 1; }
};

// InvalidArgument, naming the expected form, unless 1 <= A <= B.
absl::StatusOr<ProfileSteps> ParseProfileSteps(absl::string_view text);

}  // namespace tessera

#endif  // TESSERA_COMMON_PROFILE_STEPS_H_
