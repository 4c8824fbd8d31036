// tessera-coordinator's command line as a user meets it: a number flag whose
// value is not a number, or is outside the flag's range, is refused on one
// line that says what was expected (common/flag_checks.h), followed by CLI11's
// hint, and the process exits 2 before it opens anything.
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

TEST(CoordinatorFlagsTest, ABadNumberIsOneLineSayingWhatWasExpectedAndAUsageExit) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--http-max-streams", "0"},
       R"(--http-max-streams: expected a whole number from 1 to 1024, got "0")"},
      {{"--heartbeat-interval-ms", "abc"},
       R"(--heartbeat-interval-ms: expected a whole number from 50 to 60000, got "abc")"},
      {{"--max-slot-share", "2"},
       R"(--max-slot-share: expected a number from 0.01 to 1, got "2")"},
      {{"--db-max-bytes", "-1"},
       R"(--db-max-bytes: expected a whole number >= 0, got "-1")"},
      {{"--max-user-priority", "high"},
       R"(--max-user-priority: expected a whole number, got "high")"},
      {{"token", "revoke", "tsr_user_1"},
       R"(id: expected a whole number, got "tsr_user_1")"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult run = RunBinary("tessera-coordinator", args, 30);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_EQ(run.output, message + kHint);
  }
}

}  // namespace
}  // namespace tessera
