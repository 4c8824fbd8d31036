#include "common/byte_size.h"

#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

struct Unit {
  char letter;  // lower case
  int shift;    // the multiple is 2^shift
  const char* name;
};
constexpr Unit kUnits[] = {
    {'k', 10, "KiB"}, {'m', 20, "MiB"}, {'g', 30, "GiB"}, {'t', 40, "TiB"}};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text, absl::string_view what) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  std::string digits = absl::AsciiStrToLower(trimmed);
  int shift = 0;
  // "GiB", "GB", "G", "B": strip the "ib" or "b", then the unit's letter; an
  // "ib" needs one.
  const bool binary_suffix = absl::EndsWith(digits, "ib");
  if (binary_suffix) {
    digits.resize(digits.size() - 2);
  } else if (absl::EndsWith(digits, "b")) {
    digits.pop_back();
  }
  for (const Unit& unit : kUnits) {
    if (!digits.empty() && digits.back() == unit.letter) {
      shift = unit.shift;
      digits.pop_back();
      break;
    }
  }
  digits = std::string(absl::StripTrailingAsciiWhitespace(digits));
  int64_t value = 0;
  const bool all_digits =
      !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
  if (!all_digits || (binary_suffix && shift == 0) || !absl::SimpleAtoi(digits, &value) ||
      value > (std::numeric_limits<int64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", text,
                     "' is not a size (a whole number with an optional unit: 3GiB, "
                     "3000MB, 512K, or a number of bytes)"));
  }
  return value << shift;
}

std::string FormatByteSize(int64_t bytes) {
  const Unit* best = nullptr;
  for (const Unit& unit : kUnits) {
    if (bytes >= (int64_t{1} << unit.shift)) best = &unit;
  }
  if (best == nullptr) return absl::StrCat(bytes, " B");
  const int64_t whole = int64_t{1} << best->shift;
  if (bytes % whole == 0) return absl::StrCat(bytes / whole, " ", best->name);
  return absl::StrFormat("%.1f %s", static_cast<double>(bytes) / whole, best->name);
}

}  // namespace tessera
