// tessera-worker's command line as a user meets it: a number flag whose value
// is not a number, or is outside the flag's range, is refused on one line that
// says what was expected (common/flag_checks.h), followed by CLI11's hint, and
// the process exits 2 (bad flags) before it dials the coordinator.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/trainer/run_binary.h"

namespace tessera {
namespace {

using ::tessera::testing::RunBinary;
using ::tessera::testing::RunResult;

constexpr char kHint[] = "\nRun with --help for more information.\n";

TEST(WorkerFlagsTest, ABadNumberIsOneLineSayingWhatWasExpectedAndAUsageExit) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cpu-slots", "0"},
       R"(--cpu-slots: expected a whole number from 1 to 4096, got "0")"},
      {{"--cpu-slots", "four"},
       R"(--cpu-slots: expected a whole number from 1 to 4096, got "four")"},
      {{"--kill-grace-ms", "600001"},
       R"(--kill-grace-ms: expected a whole number from 0 to 600000, got "600001")"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult run = RunBinary("tessera-worker", args, 30);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_EQ(run.output, message + kHint);
  }
}

}  // namespace
}  // namespace tessera
