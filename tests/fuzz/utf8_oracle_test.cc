// The fuzz targets' UTF-8 oracle (fuzz_check.h) and the job spec parser's own
// check (common/job_spec.cc, reached through ParseJobSpec) against a table of
// sequences whose answers RFC 3629 fixes. The two are written apart, so that a
// bug in one shows as a disagreement with the table rather than being copied.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera {
namespace {

struct Case {
  std::string bytes;
  bool valid;
  const char* what;
};

std::vector<Case> Cases() {
  return {
      {"", true, "empty"},
      {"A~", true, "ASCII"},
      {std::string("\x00", 1), true, "U+0000"},
      {"\x7F", true, "U+007F, the last one-byte form"},
      {"\xC2\x80", true, "U+0080, the first two-byte form"},
      {"\xDF\xBF", true, "U+07FF"},
      {"\xE0\xA0\x80", true, "U+0800, the first three-byte form"},
      {"\xE2\x82\xAC", true, "U+20AC"},
      {"\xED\x9F\xBF", true, "U+D7FF, just below the surrogates"},
      {"\xEE\x80\x80", true, "U+E000, just above the surrogates"},
      {"\xEF\xBF\xBF", true, "U+FFFF"},
      {"\xF0\x90\x80\x80", true, "U+10000, the first four-byte form"},
      {"\xF0\x9F\x98\x80", true, "U+1F600"},
      {"\xF4\x8F\xBF\xBF", true, "U+10FFFF, the last code point"},
      {"\xC3\xA9t\xC3\xA9", true, "mixed"},
      // Overlong forms.
      {"\xC0\x80", false, "overlong U+0000"},
      {"\xC1\xBF", false, "overlong U+007F"},
      {"\xE0\x80\x80", false, "overlong U+0000 in three bytes"},
      {"\xE0\x9F\xBF", false, "overlong U+07FF"},
      {"\xF0\x80\x80\x80", false, "overlong U+0000 in four bytes"},
      {"\xF0\x8F\xBF\xBF", false, "overlong U+FFFF"},
      // Surrogates.
      {"\xED\xA0\x80", false, "U+D800"},
      {"\xED\xAD\xBF", false, "U+DB7F"},
      {"\xED\xB0\x80", false, "U+DC00"},
      {"\xED\xBF\xBF", false, "U+DFFF"},
      {"\xED\xA0\xBD\xED\xB8\x80", false, "a CESU-8 surrogate pair"},
      // Past U+10FFFF, and bytes that never lead.
      {"\xF4\x90\x80\x80", false, "U+110000"},
      {"\xF5\x80\x80\x80", false, "lead F5"},
      {"\xF7\xBF\xBF\xBF", false, "U+1FFFFF"},
      {"\xF8\x88\x80\x80\x80", false, "a five-byte form"},
      {"\xFC\x84\x80\x80\x80\x80", false, "a six-byte form"},
      {"\xFE", false, "FE"},
      {"\xFF", false, "FF"},
      // Truncated sequences, at the end and before ASCII.
      {"\xC3", false, "two-byte form cut after its lead"},
      {"\xE2\x82", false, "three-byte form cut after two bytes"},
      {"\xF0\x9F\x98", false, "four-byte form cut after three bytes"},
      {"\xC3"
       "A",
       false, "lead then ASCII"},
      {"\xE2\x82"
       "A",
       false, "three-byte form cut by ASCII"},
      {"\xF0\x9F"
       "AB",
       false, "four-byte form cut by ASCII"},
      // Stray continuation bytes.
      {"\x80", false, "lone 80"},
      {"\xBF", false, "lone BF"},
      {"\x80\x80", false, "two continuation bytes"},
      {"\xC3\xA9\xA9", false, "a continuation byte after a whole character"},
      {"a\x80"
       "b",
       false, "a continuation byte between ASCII"},
  };
}

TEST(Utf8OracleTest, OracleAgreesWithRfc3629Table) {
  for (const Case& c : Cases()) {
    EXPECT_EQ(fuzz::IsValidUtf8(c.bytes), c.valid)
        << c.what << ": " << absl::CHexEscape(c.bytes);
  }
}

// ParseJobSpec checks the whole text before YAML reads it: invalid UTF-8 is
// an InvalidArgument saying so; valid text may fail only for other reasons.
TEST(Utf8OracleTest, JobSpecCheckAgreesWithRfc3629Table) {
  for (const Case& c : Cases()) {
    for (const std::string& text :
         {absl::StrCat("name: a", c.bytes),
          absl::StrCat("name: a", c.bytes, "\nworld_size: 1\n")}) {
      const absl::Status status = ParseJobSpec(text).status();
      const bool says_not_utf8 = absl::IsInvalidArgument(status) &&
                                 absl::StrContains(status.message(), "not UTF-8 text");
      EXPECT_EQ(!says_not_utf8, c.valid)
          << c.what << ": " << absl::CHexEscape(text) << " -> " << status;
    }
  }
}

}  // namespace
}  // namespace tessera
