// JsonWriter: Tessera's one way of writing JSON text. tessctl's `-o json`, the
// trainer's metrics file and the HTTP API's hand-built bodies all write through
// it, so that escaping, number formats and layout are decided once:
//
//   JsonWriter line;                                  // compact: the metrics file
//   line.BeginObject().Key("rank").Int(0).Key("value").Double(0.25).EndObject();
//   line.text()  // {"rank":0,"value":0.25}
//
//   JsonWriter doc({.layout = JsonWriter::Layout::kIndented});  // tessctl -o json
//   WriteJsonValue(ordered_json_document, doc);
//
// The text is byte for byte what nlohmann::json's dump() writes for the same
// value (with error_handler_t::replace), which tessctl and the HTTP API used
// before, so no user sees a change:
//   - strings: '"' and '\' escaped, \b \t \n \f \r, other control characters as
//     \u00XX (lower-case hex), everything else as it is; invalid UTF-8 becomes
//     U+FFFD. Keys are written as given.
//   - integers, 64-bit ones included, as JSON numbers ("9007199254740993", never
//     a string, unlike protobuf's printer).
//   - doubles: see Doubles; NaN and the infinities, which JSON lacks, as null.
//   - kIndented: two spaces a level, "key": value, empty containers as {} and [].
//
// Use: Key() inside an object before each member's value; every Begin*() gets
// its End*(). A writer holds one value; text() is complete once it is closed.
//
// Thread-safety: a JsonWriter is not thread-safe; the free functions are pure.
#ifndef TESSERA_COMMON_JSON_WRITER_H_
#define TESSERA_COMMON_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

class JsonWriter {
 public:
  enum class Layout {
    kCompact,   // one line, no spaces: {"a":1,"b":[1,2]}
    kIndented,  // two spaces a level, "key": value
  };
  enum class Doubles {
    // The shortest digits that read back as the same double, with a '.' or an
    // exponent: 0.1, 2.0, 1e-05, 3.9252395629882813 (nlohmann's Grisu2).
    kShortest,
    // printf's %.17g: 0.10000000000000001, 2, 1.0000000000000001e-05 (the
    // trainer's metrics file has always used it).
    kSeventeenDigits,
  };
  struct Options {
    Layout layout = Layout::kCompact;
    Doubles doubles = Doubles::kShortest;
  };

  JsonWriter() : JsonWriter(Options{}) {}
  explicit JsonWriter(Options options);

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The name of the object member whose value comes next.
  JsonWriter& Key(absl::string_view name);

  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& text() const { return text_; }

 private:
  struct Level {
    bool object = false;
    int members = 0;           // values (arrays) or keys (objects) written so far
    bool key_pending = false;  // objects: Key() written, its value not yet
  };

  // Separates and indents a value that is not an object member's.
  void BeforeValue();
  void NewLineAt(size_t depth);
  JsonWriter& Close(char bracket);

  const Options options_;
  std::string text_;
  std::vector<Level> levels_;
};

// `text` as a JSON string, quotes included.
std::string JsonQuote(absl::string_view text);

// `value` as a JSON number in `style`; "null" when it is not finite.
std::string JsonDouble(double value, JsonWriter::Doubles style);

// Writes a nlohmann::json or nlohmann::ordered_json value through `writer`:
// objects in the value's own key order, numbers by their stored kind (signed,
// unsigned or double). Values JSON cannot hold (binary, discarded) become null.
template <typename Json>
void WriteJsonValue(const Json& value, JsonWriter& writer) {
  using Type = typename Json::value_t;
  switch (value.type()) {
    case Type::object:
      writer.BeginObject();
      for (auto it = value.begin(); it != value.end(); ++it) {
        writer.Key(it.key());
        WriteJsonValue(it.value(), writer);
      }
      writer.EndObject();
      return;
    case Type::array:
      writer.BeginArray();
      for (const Json& element : value) WriteJsonValue(element, writer);
      writer.EndArray();
      return;
    case Type::string:
      writer.String(value.template get_ref<const typename Json::string_t&>());
      return;
    case Type::boolean:
      writer.Bool(value.template get<bool>());
      return;
    case Type::number_integer:
      writer.Int(value.template get<int64_t>());
      return;
    case Type::number_unsigned:
      writer.Uint(value.template get<uint64_t>());
      return;
    case Type::number_float:
      writer.Double(value.template get<double>());
      return;
    default:
      writer.Null();
      return;
  }
}

}  // namespace tessera

#endif  // TESSERA_COMMON_JSON_WRITER_H_
