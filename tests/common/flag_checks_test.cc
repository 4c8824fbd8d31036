// The numeric flag checks (common/flag_checks.h) through a real CLI11 parse:
// what passes, and a refusal that says what was expected.
#include "common/flag_checks.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Parses `args` (in order) with one option --v checked by `check`; the
// error's text, or "" when it parsed.
template <typename T>
std::string Parse(const CLI::Validator& check, std::vector<std::string> args, T* value) {
  CLI::App app("test");
  app.add_option("--v", *value, "the value")->check(check);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(FlagChecksTest, WholeNumbersPassAndAnythingElseSaysWhatWasExpected) {
  int64_t v = 0;
  EXPECT_EQ(Parse(IsNumber<int64_t>(), {"--v", "-12"}, &v), "");
  EXPECT_EQ(v, -12);
  EXPECT_EQ(Parse(IsNumber<int64_t>(), {"--v", "abc"}, &v),
            "--v: expected a whole number, got \"abc\"");
  EXPECT_EQ(Parse(IsNumber<int64_t>(), {"--v", "1.5"}, &v),
            "--v: expected a whole number, got \"1.5\"");
  int32_t small = 0;
  EXPECT_EQ(Parse(IsNumber<int32_t>(), {"--v", "9999999999"}, &small),
            "--v: expected a whole number, got \"9999999999\"");
}

TEST(FlagChecksTest, AMinimumIsPartOfWhatIsExpected) {
  int64_t id = 0;
  EXPECT_EQ(Parse(NumberAtLeast<int64_t>(1), {"--v", "7"}, &id), "");
  EXPECT_EQ(id, 7);
  const std::string refused = Parse(NumberAtLeast<int64_t>(1), {"--v", "0"}, &id);
  EXPECT_EQ(refused, "--v: expected a whole number >= 1, got \"0\"");
  // Never CLI11's range to the largest double.
  EXPECT_LT(refused.size(), 60u);
  double seconds = 0;
  EXPECT_EQ(Parse(NumberAtLeast<double>(0), {"--v", "2.5"}, &seconds), "");
  EXPECT_DOUBLE_EQ(seconds, 2.5);
  EXPECT_EQ(Parse(NumberAtLeast<double>(0), {"--v", "-1"}, &seconds),
            "--v: expected a number >= 0, got \"-1\"");
  EXPECT_EQ(Parse(IsNumber<double>(), {"--v", "inf"}, &seconds),
            "--v: expected a number, got \"inf\"");
}

TEST(FlagChecksTest, ARangeIsPartOfWhatIsExpectedAndIncludesItsEnds) {
  int slots = 0;
  EXPECT_EQ(Parse(NumberInRange(1, 4096), {"--v", "1"}, &slots), "");
  EXPECT_EQ(Parse(NumberInRange(1, 4096), {"--v", "4096"}, &slots), "");
  EXPECT_EQ(slots, 4096);
  EXPECT_EQ(Parse(NumberInRange(1, 4096), {"--v", "4097"}, &slots),
            "--v: expected a whole number from 1 to 4096, got \"4097\"");
  EXPECT_EQ(Parse(NumberInRange(1, 4096), {"--v", "0"}, &slots),
            "--v: expected a whole number from 1 to 4096, got \"0\"");
  EXPECT_EQ(Parse(NumberInRange(1, 4096), {"--v", "abc"}, &slots),
            "--v: expected a whole number from 1 to 4096, got \"abc\"");
  double share = 0;
  EXPECT_EQ(Parse(NumberInRange(0.01, 1.0), {"--v", "0.5"}, &share), "");
  EXPECT_DOUBLE_EQ(share, 0.5);
  EXPECT_EQ(Parse(NumberInRange(0.01, 1.0), {"--v", "1.5"}, &share),
            "--v: expected a number from 0.01 to 1, got \"1.5\"");
  EXPECT_EQ(Parse(NumberInRange(0.01, 1.0), {"--v", "nan"}, &share),
            "--v: expected a number from 0.01 to 1, got \"nan\"");
}

TEST(FlagChecksTest, ListsAreCheckedValueByValue) {
  std::vector<double> values;
  EXPECT_EQ(Parse(IsNumber<double>(), {"--v", "0.5", "0.25"}, &values), "");
  EXPECT_EQ(values, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ(Parse(IsNumber<double>(), {"--v", "0.5", "x"}, &values),
            "--v: expected a number, got \"x\"");
}

TEST(FlagChecksTest, HelpNamesTheCheckAsCli11sOwnDo) {
  CLI::App app("test");
  int64_t id = 0;
  int32_t count = 0;
  app.add_option("--id", id, "")->check(NumberAtLeast<int64_t>(1));
  app.add_option("--count", count, "")->check(NumberAtLeast<int32_t>(0));
  int slots = 0;
  app.add_option("--slots", slots, "")->check(NumberInRange(1, 4096));
  const std::string help = app.help();
  EXPECT_NE(help.find("INT:POSITIVE"), std::string::npos) << help;
  EXPECT_NE(help.find("INT:NONNEGATIVE"), std::string::npos) << help;
  EXPECT_NE(help.find("INT:FROM 1 TO 4096"), std::string::npos) << help;
}

}  // namespace
}  // namespace tessera
