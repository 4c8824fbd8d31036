// Helpers shared by the fuzz targets: a check that turns a broken invariant into
// a crash libFuzzer records, the splitting of an input into NUL-separated
// parts, and an oracle of well-formed UTF-8.
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_TESTS_FUZZ_FUZZ_CHECK_H_
#define TESSERA_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace tessera::fuzz {

// Aborts (a crash for libFuzzer, which then saves the input) when `ok` is false,
// printing `what` and `detail` (C-escaped, so binary data stays readable) so the
// report says which invariant broke.
inline void Check(bool ok, absl::string_view what, absl::string_view detail = {}) {
  if (ok) return;
  std::fprintf(stderr, "\n==== fuzz invariant broken: %.*s\n",
               static_cast<int>(what.size()), what.data());
  if (!detail.empty()) {
    // Long details are cut: the input itself is saved by libFuzzer.
    constexpr size_t kMaxShown = 2000;
    const std::string escaped = absl::CHexEscape(detail.substr(0, kMaxShown));
    std::fprintf(stderr, "==== detail: %s\n", escaped.c_str());
  }
  std::abort();
}

// Splits `data` at NUL bytes; parts after the first `max_parts` are dropped.
inline std::vector<std::string> SplitAtNul(const uint8_t* data, size_t size,
                                           size_t max_parts) {
  std::vector<std::string> parts;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (parts.size() < max_parts) {
    const size_t nul = all.find('\0', start);
    if (nul == std::string_view::npos) {
      parts.emplace_back(all.substr(start));
      break;
    }
    parts.emplace_back(all.substr(start, nul - start));
    start = nul + 1;
  }
  return parts;
}

// The oracle of well-formed UTF-8 for the fuzz targets' invariants. It is
// written from RFC 3629's grammar (section 4), one row per alternative, and
// decodes no code points, so that it shares no logic with common/job_spec.cc's
// check (tests/fuzz/utf8_oracle_test.cc holds both to a table of known
// answers). A row: the lead byte's range, the second byte's range (overlong
// forms, surrogates and code points past U+10FFFF are outside it), and the
// sequence's length; every later byte is a tail byte, 80..BF.
struct Utf8Row {
  uint8_t lead_min, lead_max;
  uint8_t second_min, second_max;
  int length;
};
inline constexpr Utf8Row kRfc3629Rows[] = {
    {0x00, 0x7F, 0x00, 0x00, 1},  // UTF8-1
    {0xC2, 0xDF, 0x80, 0xBF, 2},  // UTF8-2
    {0xE0, 0xE0, 0xA0, 0xBF, 3},  // UTF8-3
    {0xE1, 0xEC, 0x80, 0xBF, 3}, {0xED, 0xED, 0x80, 0x9F, 3},
    {0xEE, 0xEF, 0x80, 0xBF, 3}, {0xF0, 0xF0, 0x90, 0xBF, 4},  // UTF8-4
    {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4},
};

inline bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<uint8_t>(text[i]);
    const Utf8Row* row = nullptr;
    for (const Utf8Row& r : kRfc3629Rows) {
      if (lead >= r.lead_min && lead <= r.lead_max) row = &r;
    }
    if (row == nullptr || text.size() - i < static_cast<size_t>(row->length))
      return false;
    for (int k = 1; k < row->length; ++k) {
      const auto byte = static_cast<uint8_t>(text[i + k]);
      const uint8_t min = k == 1 ? row->second_min : 0x80;
      const uint8_t max = k == 1 ? row->second_max : 0xBF;
      if (byte < min || byte > max) return false;
    }
    i += static_cast<size_t>(row->length);
  }
  return true;
}

}  // namespace tessera::fuzz

#endif  // TESSERA_TESTS_FUZZ_FUZZ_CHECK_H_
