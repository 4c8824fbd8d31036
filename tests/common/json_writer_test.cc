// JsonWriter: escaping, 64-bit integers as numbers, both double formats, key
// names as given, and byte-equality with nlohmann::json's dump(), which tessctl
// and the HTTP API printed with before the writer (and which serves here as the
// oracle).
#include "common/json_writer.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

std::string Compact(const ordered_json& value) {
  JsonWriter writer;
  WriteJsonValue(value, writer);
  return writer.text();
}

std::string Indented(const ordered_json& value) {
  JsonWriter writer({.layout = JsonWriter::Layout::kIndented});
  WriteJsonValue(value, writer);
  return writer.text();
}

TEST(JsonWriterTest, WritesTheMetricsFileLineCompactly) {
  JsonWriter line({.doubles = JsonWriter::Doubles::kSeventeenDigits});
  line.BeginObject()
      .Key("rank")
      .Int(1)
      .Key("step")
      .Int(120)
      .Key("name")
      .String("loss")
      .Key("value")
      .Double(0.1)
      .Key("unix_ms")
      .Int(1714564842000)
      .EndObject();
  EXPECT_EQ(line.text(),
            R"({"rank":1,"step":120,"name":"loss","value":0.10000000000000001,)"
            R"("unix_ms":1714564842000})");
}

TEST(JsonWriterTest, KeysAreWrittenAsGiven) {
  JsonWriter writer;
  writer.BeginObject()
      .Key("world_size")
      .Int(2)
      .Key("created_unix_ms")
      .Int(5)
      .Key("sweepId")
      .Null()
      .EndObject();
  EXPECT_EQ(writer.text(), R"({"world_size":2,"created_unix_ms":5,"sweepId":null})");
}

TEST(JsonWriterTest, SixtyFourBitIntegersAreNumbersNotStrings) {
  JsonWriter writer;
  writer.BeginArray()
      .Int(std::numeric_limits<int64_t>::max())
      .Int(std::numeric_limits<int64_t>::min())
      .Int(9007199254740993)  // 2^53 + 1: not a double
      .Uint(std::numeric_limits<uint64_t>::max())
      .Int(0)
      .EndArray();
  EXPECT_EQ(writer.text(),
            "[9223372036854775807,-9223372036854775808,9007199254740993,"
            "18446744073709551615,0]");
}

TEST(JsonWriterTest, ShortestDoublesKeepTessctlsFormat) {
  EXPECT_EQ(JsonDouble(0.1, JsonWriter::Doubles::kShortest), "0.1");
  EXPECT_EQ(JsonDouble(2.0, JsonWriter::Doubles::kShortest), "2.0");
  EXPECT_EQ(JsonDouble(-0.0, JsonWriter::Doubles::kShortest), "-0.0");
  EXPECT_EQ(JsonDouble(1e-5, JsonWriter::Doubles::kShortest), "1e-05");
  EXPECT_EQ(JsonDouble(1.5e300, JsonWriter::Doubles::kShortest), "1.5e+300");
  EXPECT_EQ(JsonDouble(123456789012345.0, JsonWriter::Doubles::kShortest),
            "123456789012345.0");
  EXPECT_EQ(JsonDouble(1e16, JsonWriter::Doubles::kShortest), "1e+16");
  // A float's value as a double: Grisu2's digits, where std::to_chars would end
  // in ...812.
  EXPECT_EQ(JsonDouble(static_cast<double>(3.9252395629882813f),
                       JsonWriter::Doubles::kShortest),
            "3.9252395629882813");
}

TEST(JsonWriterTest, SeventeenDigitDoublesKeepTheMetricsFilesFormat) {
  EXPECT_EQ(JsonDouble(0.1, JsonWriter::Doubles::kSeventeenDigits),
            "0.10000000000000001");
  EXPECT_EQ(JsonDouble(2.0, JsonWriter::Doubles::kSeventeenDigits), "2");
  EXPECT_EQ(JsonDouble(2.25, JsonWriter::Doubles::kSeventeenDigits), "2.25");
  EXPECT_EQ(JsonDouble(1e-5, JsonWriter::Doubles::kSeventeenDigits),
            "1.0000000000000001e-05");
}

TEST(JsonWriterTest, NonFiniteDoublesAreNullInBothFormats) {
  for (JsonWriter::Doubles style :
       {JsonWriter::Doubles::kShortest, JsonWriter::Doubles::kSeventeenDigits}) {
    EXPECT_EQ(JsonDouble(std::nan(""), style), "null");
    EXPECT_EQ(JsonDouble(std::numeric_limits<double>::infinity(), style), "null");
    EXPECT_EQ(JsonDouble(-std::numeric_limits<double>::infinity(), style), "null");
  }
}

TEST(JsonWriterTest, ShortestDoublesMatchNlohmannForManyValues) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> floats(0, 10);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t bits = rng();
    double any;
    std::memcpy(&any, &bits, sizeof(any));
    for (double value : {any, static_cast<double>(floats(rng)), unit(rng),
                         std::round(unit(rng) * 1e6) / 1e4}) {
      ASSERT_EQ(JsonDouble(value, JsonWriter::Doubles::kShortest),
                ordered_json(value).dump())
          << "bits " << bits;
    }
  }
}

TEST(JsonWriterTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonQuote("\b\t\n\f\r"), R"("\b\t\n\f\r")");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(JsonQuote(std::string("nul\0", 4)), R"("nul\u0000")");
  // DEL, '/' and non-ASCII text are written as they are.
  EXPECT_EQ(JsonQuote("\x7f/é±"), "\"\x7f/é±\"");
}

TEST(JsonWriterTest, InvalidUtf8BecomesTheReplacementCharacter) {
  EXPECT_EQ(JsonQuote("a\xff"
                      "b"),
            "\"a\xEF\xBF\xBD"
            "b\"");
  // A sequence cut short, in the middle and at the end.
  EXPECT_EQ(JsonQuote("\xC3"
                      "x\xE2\x82"),
            "\"\xEF\xBF\xBDx\xEF\xBF\xBD\"");
}

TEST(JsonWriterTest, StringsMatchNlohmannForRandomBytes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 12);
  for (int i = 0; i < 100000; ++i) {
    std::string text(static_cast<size_t>(length(rng)), '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    ASSERT_EQ(JsonQuote(text), nlohmann::json(text).dump(-1, ' ', false, kReplace));
  }
}

ordered_json Document() {
  return {{"id", 3},
          {"name", "fmnist \"vit\"\n"},
          {"big", std::numeric_limits<int64_t>::max()},
          {"unsigned", std::numeric_limits<uint64_t>::max()},
          {"accuracy", 0.8412},
          {"whole", 2.0},
          {"nan", std::nan("")},
          {"alive", true},
          {"sweep_id", nullptr},
          {"empty_array", ordered_json::array()},
          {"empty_object", ordered_json::object()},
          {"ranks",
           {{{"rank", 0}, {"pid", 4242}, {"progress", {{"step", 12}, {"phase", "fwd"}}}},
            {{"rank", 1}, {"pid", nullptr}, {"progress", nullptr}}}},
          {"nested", {1, {2, {3, ordered_json::array()}}, "x"}},
          {"bad_utf8", "\xC3(\xff"}};
}

TEST(JsonWriterTest, IndentedLayoutIsNlohmannsDumpWithTwoSpaces) {
  const ordered_json doc = Document();
  EXPECT_EQ(Indented(doc), doc.dump(2, ' ', false, kReplace));
  EXPECT_EQ(Indented(ordered_json::array()), "[]");
  EXPECT_EQ(Indented(ordered_json::object()), "{}");
  EXPECT_EQ(Indented(ordered_json({{"a", {1, 2}}})),
            "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
}

TEST(JsonWriterTest, CompactLayoutIsNlohmannsOneLineDump) {
  const ordered_json doc = Document();
  EXPECT_EQ(Compact(doc), doc.dump(-1, ' ', false, kReplace));
  // A sorted nlohmann::json keeps its own (sorted) order too.
  const nlohmann::json sorted = nlohmann::json::parse(doc.dump(-1, ' ', false, kReplace));
  JsonWriter writer;
  WriteJsonValue(sorted, writer);
  EXPECT_EQ(writer.text(), sorted.dump(-1, ' ', false, kReplace));
}

TEST(JsonWriterTest, ScalarsAtTheTopLevel) {
  EXPECT_EQ(Compact(ordered_json(5)), "5");
  EXPECT_EQ(Compact(ordered_json("x")), "\"x\"");
  EXPECT_EQ(Indented(ordered_json(nullptr)), "null");
}

}  // namespace
}  // namespace tessera
