#include "common/json_writer.h"

#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {

namespace {

constexpr size_t kIndentSpaces = 2;

}  // namespace

// Strings and shortest doubles come from nlohmann's own serializer: its UTF-8
// repair and its Grisu2 digits (which differ from std::to_chars' shortest
// digits for some doubles) are what tessctl has always printed.
std::string JsonQuote(absl::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string JsonDouble(double value, JsonWriter::Doubles style) {
  if (!std::isfinite(value)) return "null";
  if (style == JsonWriter::Doubles::kSeventeenDigits) {
    return absl::StrFormat("%.17g", value);
  }
  return nlohmann::json(value).dump();
}

JsonWriter::JsonWriter(Options options) : options_(options) {}

void JsonWriter::NewLineAt(size_t depth) {
  if (options_.layout != Layout::kIndented) return;
  text_ += '\n';
  text_.append(depth * kIndentSpaces, ' ');
}

void JsonWriter::BeforeValue() {
  if (levels_.empty()) return;
  Level& level = levels_.back();
  if (level.object) {
    // Key() has placed the member's name; its value follows directly.
    assert(level.key_pending && "JsonWriter: a member's value needs Key() first");
    level.key_pending = false;
    return;
  }
  if (level.members++ > 0) text_ += ',';
  NewLineAt(levels_.size());
}

JsonWriter& JsonWriter::Key(absl::string_view name) {
  assert(!levels_.empty() && levels_.back().object && "JsonWriter: Key() outside object");
  Level& level = levels_.back();
  assert(!level.key_pending && "JsonWriter: Key() twice without a value");
  level.key_pending = true;
  if (level.members++ > 0) text_ += ',';
  NewLineAt(levels_.size());
  text_ += JsonQuote(name);
  text_ += options_.layout == Layout::kIndented ? ": " : ":";
  return *this;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  text_ += '{';
  levels_.push_back({.object = true});
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  text_ += '[';
  levels_.push_back({.object = false});
  return *this;
}

JsonWriter& JsonWriter::Close(char bracket) {
  assert(!levels_.empty() && "JsonWriter: End*() without Begin*()");
  const bool empty = levels_.back().members == 0;
  levels_.pop_back();
  // Empty containers stay on one line: {} and [].
  if (!empty) NewLineAt(levels_.size());
  text_ += bracket;
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  assert(!levels_.empty() && levels_.back().object);
  return Close('}');
}

JsonWriter& JsonWriter::EndArray() {
  assert(!levels_.empty() && !levels_.back().object);
  return Close(']');
}

JsonWriter& JsonWriter::String(absl::string_view value) {
  BeforeValue();
  text_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&text_, value);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  absl::StrAppend(&text_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  text_ += JsonDouble(value, options_.doubles);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  text_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  text_ += "null";
  return *this;
}

}  // namespace tessera
