// The tessera-train command line: one flag per tessera.v1.TrainerConfig field
// (field foo_bar is --foo-bar, written --foo-bar=value or --foo-bar value) plus
// the launch flags the worker adds (--coordinator, --job-id, --attempt, --rank,
// --world-size, --local-rank) and --metrics-file / --rendezvous-store.
//
// Parsing only checks syntax (unknown flags, malformed numbers); ranges are
// checked by ValidateTrainerOptions / ValidateLaunchOptions. Free functions:
// thread-safe.
#ifndef TESSERA_WORKER_TRAINER_RUN_TRAINER_FLAGS_H_
#define TESSERA_WORKER_TRAINER_RUN_TRAINER_FLAGS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

struct TrainerFlags {
  TrainerOptions trainer;
  LaunchOptions launch;
  // Two-rank Gloo all-reduce: "exchange" (one round: each rank sends its whole
  // bucket and adds the peer's) or "ring" (Gloo's allreduce). Not a job field:
  // for benchmarking the choice.
  std::string gloo_allreduce = "exchange";
  // Non-empty when --help was given: print it and exit successfully.
  std::string help;
  // The TrainerConfig flags given on the command line (names without dashes),
  // as opposed to left at their defaults: what the preprocessing that comes
  // with weights does not override (weights_preprocessing.h).
  std::set<std::string> given;
};

// Parses `args` (without the program name). InvalidArgument with CLI11's message
// for unknown flags, missing values and malformed values.
absl::StatusOr<TrainerFlags> ParseTrainerFlags(const std::vector<std::string>& args);

// The flag names (without dashes) that carry TrainerConfig fields, in field order.
const std::vector<std::string>& TrainerConfigFlagNames();

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_TRAINER_FLAGS_H_
