// Checks of numeric command-line values for CLI11 that say what the value
// should be, for the flags of tessctl, tessera-train and the other binaries:
//
//   job: expected a whole number >= 1, got "trainer.crop_fraction=1"
//   --max-steps: expected a whole number, got "abc"
//
// in place of CLI11's own words for the same mistakes ("Could not convert:
// --max-steps = abc", or a range that runs to the largest double, printed
// with all its 309 digits). A check runs on the text before CLI11 converts
// it, so its message is the one the user sees:
//
//   app.add_option("--limit", limit, "At most N jobs")->check(NumberAtLeast<int64_t>(0));
//   app.add_option("--slots", slots, "Ranks at once")->check(NumberInRange(1, 4096));
//   app.add_option("--lr", lr, "Learning rate")->check(IsNumber<double>());
//
// Header-only over CLI11 (link tessera_flag_checks). The checks are values
// without shared state: thread-safe.
#ifndef TESSERA_COMMON_FLAG_CHECKS_H_
#define TESSERA_COMMON_FLAG_CHECKS_H_

#include <CLI/CLI.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace flag_checks_internal {

// "whole number" for integral T, "number" otherwise.
template <typename T>
constexpr const char* Kind() {
  return std::is_integral_v<T> ? "whole number" : "number";
}

// Parses `text` as a T (decimal; a finite value for floating-point T).
template <typename T>
bool Parse(const std::string& text, T* value) {
  if constexpr (std::is_integral_v<T>) {
    return absl::SimpleAtoi(text, value);
  } else {
    double parsed = 0;
    if (!absl::SimpleAtod(text, &parsed) || !std::isfinite(parsed)) return false;
    *value = static_cast<T>(parsed);
    return true;
  }
}

// What help shows after the type, as CLI11's own checks name themselves:
// "INT:POSITIVE", "FLOAT:NONNEGATIVE", "INT:AT LEAST 8", "INT:FROM 1 TO 4096";
// nothing for IsNumber.
template <typename T>
std::string Description(std::optional<T> min, std::optional<T> max) {
  if (!min.has_value()) return "";
  if (max.has_value()) return absl::StrCat("FROM ", *min, " TO ", *max);
  if (*min == 0) return "NONNEGATIVE";
  if (*min == 1 && std::is_integral_v<T>) return "POSITIVE";
  return absl::StrCat("AT LEAST ", *min);
}

// What the value should be: "a whole number", "a number >= 0", "a whole
// number from 1 to 4096".
template <typename T>
std::string Expected(std::optional<T> min, std::optional<T> max) {
  std::string expected = absl::StrCat("a ", Kind<T>());
  if (min.has_value() && max.has_value()) {
    absl::StrAppend(&expected, " from ", *min, " to ", *max);
  } else if (min.has_value()) {
    absl::StrAppend(&expected, " >= ", *min);
  }
  return expected;
}

// The check: the text is a T, at least `min` and at most `max` when given
// (a `max` comes with a `min`).
template <typename T>
CLI::Validator Check(std::optional<T> min, std::optional<T> max = std::nullopt) {
  return CLI::Validator(
      [min, max, expected = Expected(min, max)](std::string& text) -> std::string {
        T value{};
        if (Parse(text, &value) && (!min.has_value() || value >= *min) &&
            (!max.has_value() || value <= *max)) {
          return "";
        }
        return absl::StrCat("expected ", expected, ", got \"", text, "\"");
      },
      Description(min, max));
}

}  // namespace flag_checks_internal

// The value is a T: a whole number within T's range for integral T, a finite
// number for floating-point T.
template <typename T>
CLI::Validator IsNumber() {
  return flag_checks_internal::Check<T>(std::nullopt);
}

// The value is a T (as IsNumber) of at least `min`.
template <typename T>
CLI::Validator NumberAtLeast(T min) {
  return flag_checks_internal::Check<T>(min);
}

// The value is a T (as IsNumber) from `min` to `max`, both included.
template <typename T>
CLI::Validator NumberInRange(T min, T max) {
  return flag_checks_internal::Check<T>(min, max);
}

}  // namespace tessera

#endif  // TESSERA_COMMON_FLAG_CHECKS_H_
