// Helpers shared by the fuzz targets: a check that turns a broken invariant into
// a crash libFuzzer records, and the splitting of an input into NUL-separated
// parts.
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

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF).
inline bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace tessera::fuzz

#endif  // TESSERA_TESTS_FUZZ_FUZZ_CHECK_H_
