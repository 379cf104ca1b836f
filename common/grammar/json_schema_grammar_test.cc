#include "common/grammar/json_schema_grammar.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/grammar_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::grammar {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Grammar> FromSchema(std::string_view schema) {
  auto gbnf = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << schema << ": " << gbnf.status();
  if (!gbnf.ok()) return nullptr;
  auto g = Grammar::Compile(*gbnf);
  EXPECT_TRUE(g.ok()) << *gbnf << ": " << g.status();
  return g.ok() ? std::make_shared<const Grammar>(*std::move(g)) : nullptr;
}

std::string SchemaError(std::string_view schema) {
  auto gbnf = JsonSchemaToGbnf(schema);
  EXPECT_FALSE(gbnf.ok()) << schema;
  return gbnf.ok() ? "" : std::string(gbnf.status().message());
}

TEST(JsonSchemaToGbnf, Examples) {
  struct Case {
    const char* schema;
    std::vector<std::string> yes, no;
  };
  for (
      const Case& c : std::vector<Case>{
          {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name"]})",
           {R"({"name": "Ann"})", R"({"name": "Ann", "age": 31})",
            "{\n  \"name\": \"x\",\n  \"age\": -2\n}"},
           {R"({"age": 31})", R"({"age": 31, "name": "Ann"})", R"({"name": "Ann", "x": 1})",
            R"({"name": 5})", R"({"name": "Ann",})"}},
          {R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": {"type": "null"}})",
           {"{}", R"({"a": true})", R"({"a": false, "z": null, "y": null})", R"({"z": null})"},
           {R"({"z": 1})", R"({"a": null})"}},
          {R"({"type": "array", "items": {"enum": ["x", 1, null]}, "minItems": 1, "maxItems": 3})",
           {R"(["x"])", R"([1, null, "x"])"},
           {"[]", R"(["x", 1, null, 1])", R"(["y"])"}},
          {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})",
           {"[]", "[1]", R"([1, "a"])"},
           {R"(["a"])", R"([1, "a", 2])"}},
          {R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10, "maximum": 20}]})",
           {R"("ab")", R"("")", "10", "20", R"("\u00e9\n")"},
           {R"("abc")", "9", "21", "15.5"}},
          {R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})",
           {R"("ab-12")"},
           {R"("ab-1")", R"("Ab-12")"}},
          {R"({"type": "string", "pattern": "\\d{3}"})", {R"("x123y")", R"("123")"}, {R"("12")"}},
          {R"({"type": "string", "format": "date-time"})",
           {R"("2024-02-29T13:05:00Z")", R"("2024-02-29T13:05:00.25+01:00")"},
           {R"("2024-13-01T00:00:00Z")", R"("2024-02-29 13:05:00Z")"}},
          {R"({"type": "string", "format": "uuid"})",
           {R"("123e4567-e89b-12d3-a456-426614174000")"},
           {R"("123e4567e89b12d3a456426614174000")"}},
          {R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})",
           {"0.5", "1", "1.000", "0.001"},
           {"0", "0.0", "1.5", "-0.5", "2"}},
          {R"({"type": "number", "minimum": -3, "exclusiveMaximum": -1})",
           {"-3", "-1.5", "-2.999", "-3.0"},
           {"-1", "-3.5", "0", "-1.0"}},
          {R"({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                "required": ["next"]}}, "$ref": "#/$defs/node"})",
           {R"({"next": null})", R"({"next": {"next": {"next": null}}})"},
           {R"({"next": {}})"}},
          {R"({"const": {"k": [1, 2]}})", {R"({"k":[1,2]})"}, {R"({"k": [1, 2]})"}},
          {R"({"type": ["integer", "null"]})", {"3", "null"}, {"3.5", "\"3\""}},
          {"true", {"1", R"({"a": [true, {"b": null}]})", R"("s")"}, {"{", "tru"}},
          {R"({"title": "anything", "description": "annotations only"})", {"[]", "-1e5"}, {"[,]"}},
      }) {
    SCOPED_TRACE(c.schema);
    auto g = FromSchema(c.schema);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.yes) EXPECT_TRUE(Matches(g, s)) << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Matches(g, s)) << s;
  }
}

// format: date accepts exactly the calendar's dates: every day of years around each rule
// (common, leap, century, 400th, the first and last four-digit years) and every
// month/day pair 00..13 / 00..32, against std::chrono's calendar (year 0000 refused, as
// Python's date.fromisoformat — the serving test's format checker — refuses it).
TEST(JsonSchemaToGbnf, DateFormatIsTheCalendar) {
  auto g = FromSchema(R"({"type": "string", "format": "date"})");
  ASSERT_NE(g, nullptr);
  int accepted = 0, checked = 0;
  for (int year : {0, 1, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999}) {
    for (unsigned month = 0; month <= 13; ++month) {
      for (unsigned day = 0; day <= 32; ++day) {
        const std::chrono::year_month_day ymd{std::chrono::year(year), std::chrono::month(month),
                                              std::chrono::day(day)};
        const bool valid = year >= 1 && ymd.ok();
        char text[32];
        std::snprintf(text, sizeof(text), "\"%04d-%02u-%02u\"", year, month, day);
        EXPECT_EQ(Matches(g, text), valid) << text;
        accepted += valid;
        ++checked;
      }
    }
  }
  EXPECT_EQ(accepted, 13 * 365 + 6);  // 14 years, 0000 refused; 4, 400, 2000, 2024, 2400, 9996 leap
  EXPECT_EQ(checked, 14 * 14 * 33);
}

// Properties come in the order the schema lists them, not sorted.
TEST(JsonSchemaToGbnf, PropertiesKeepTheSchemasOrder) {
  auto g = FromSchema(
      R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
          "required": ["zeta", "alpha"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(Matches(g, R"({"alpha": 2, "zeta": 1})"));
}

// Integer ranges against arithmetic, over windows around random bounds.
TEST(JsonSchemaToGbnf, IntegerRangesMatchArithmetic) {
  std::mt19937_64 rng(5);
  auto pick = [&] {
    static const int64_t kScales[] = {1, 10, 100, 1000, 100000, 1000000000000LL};
    return static_cast<int64_t>(rng() % (2 * kScales[rng() % 6] + 1)) - kScales[rng() % 6];
  };
  for (int round = 0; round < 60; ++round) {
    std::optional<int64_t> lo, hi;
    if (rng() % 4 != 0) lo = pick();
    if (rng() % 4 != 0) hi = pick();
    if (lo && hi && *lo > *hi) std::swap(*lo, *hi);
    nlohmann::json schema = {{"type", "integer"}};
    if (lo) schema["minimum"] = *lo;
    if (hi) schema["maximum"] = *hi;
    SCOPED_TRACE(schema.dump());
    auto g = FromSchema(schema.dump());
    ASSERT_NE(g, nullptr);
    std::vector<int64_t> probes = {0, 1, -1, 9, 10, 99, 100, -10, -100, 1000000000000LL};
    for (std::optional<int64_t> b : {lo, hi}) {
      if (!b) continue;
      for (int64_t d = -12; d <= 12; ++d) probes.push_back(*b + d);
      probes.push_back(*b * 10);
      probes.push_back(-*b);
    }
    for (int64_t x : probes) {
      const bool want = (!lo || x >= *lo) && (!hi || x <= *hi);
      EXPECT_EQ(Matches(g, std::to_string(x)), want) << x;
    }
    EXPECT_FALSE(Matches(g, "01"));
    EXPECT_FALSE(Matches(g, "-0"));
  }
}

// Number ranges with integer bounds against arithmetic on decimals.
TEST(JsonSchemaToGbnf, NumberRangesMatchArithmetic) {
  std::mt19937 rng(9);
  for (int round = 0; round < 80; ++round) {
    nlohmann::json schema = {{"type", "number"}};
    int lo = static_cast<int>(rng() % 41) - 20, hi = static_cast<int>(rng() % 41) - 20;
    if (lo > hi) std::swap(lo, hi);
    const bool has_lo = rng() % 5 != 0, has_hi = rng() % 5 != 0;
    const bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    if (has_lo) schema[lo_ex ? "exclusiveMinimum" : "minimum"] = lo;
    if (has_hi) schema[hi_ex ? "exclusiveMaximum" : "maximum"] = hi;
    const bool empty = has_lo && has_hi && (lo_ex || hi_ex) && lo == hi;
    auto gbnf = JsonSchemaToGbnf(schema.dump());
    if (empty) {
      EXPECT_FALSE(gbnf.ok()) << schema.dump();
      continue;
    }
    SCOPED_TRACE(schema.dump());
    auto g = FromSchema(schema.dump());
    ASSERT_NE(g, nullptr);
    for (int k = 0; k < 60; ++k) {
      const int whole = static_cast<int>(rng() % 51) - 25;
      std::string text = std::to_string(whole);
      switch (rng() % 4) {
        case 0:
          break;
        case 1:
          text += ".0";
          break;
        case 2:
          text += ".5";
          break;
        default:
          text += ".000" + std::to_string(1 + rng() % 9);
          break;
      }
      if (whole == 0 && rng() % 3 == 0) text = "-" + text;  // "-0.5", "-0"
      const double x = std::stod(text);
      const bool want =
          (!has_lo || (lo_ex ? x > lo : x >= lo)) && (!has_hi || (hi_ex ? x < hi : x <= hi));
      // "-0" style spellings of zero are valid JSON the grammar may leave out.
      if (text.starts_with("-0") && x == 0) continue;
      EXPECT_EQ(Matches(g, text), want) << text;
    }
  }
}

// Random walks through a schema's grammar always end in JSON that parses.
TEST(JsonSchemaToGbnf, RandomOutputsAreJson) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "id": {"type": "integer", "minimum": 1},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
      "score": {"type": "number"},
      "kind": {"enum": ["a", "b"]}}, "required": ["id", "kind"]})");
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(1);
  int ended = 0;
  for (int walk = 0; walk < 200; ++walk) {
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < 400 && !(m.CanEnd() && !m.CanContinue()); ++step) {
      std::vector<uint8_t> ok;
      for (int b = 0; b < 256; ++b) {
        GrammarMatcher::State next;
        m.Step(m.state(), static_cast<uint8_t>(b), &next);
        if (next.Alive()) ok.push_back(static_cast<uint8_t>(b));
      }
      // Prefer closing once the text is long, so that walks end.
      std::vector<uint8_t> closing;
      for (uint8_t b : ok) {
        if (b == '}' || b == ']' || b == '"' || b == ',') closing.push_back(b);
      }
      const auto& from = text.size() > 60 && !closing.empty() ? closing : ok;
      ASSERT_FALSE(from.empty()) << text;
      const uint8_t b = from[rng() % from.size()];
      ASSERT_TRUE(m.Accept(b));
      text += static_cast<char>(b);
    }
    if (!m.CanEnd()) continue;
    ++ended;
    auto parsed = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << text;
    EXPECT_GE(parsed.at("id").get<int64_t>(), 1) << text;
    EXPECT_TRUE(parsed.at("kind") == "a" || parsed.at("kind") == "b") << text;
  }
  EXPECT_GT(ended, 150);
}

// The grammar accepts exactly the texts an independent validator (Python's jsonschema,
// tests/reference/make_schema_golden.py) finds valid, on random schemas with random
// instances, valid and mutated, spelled as the grammar spells JSON.
TEST(JsonSchemaToGbnf, AcceptsExactlyWhatJsonschemaAccepts) {
  std::ifstream in(::tandem::testing::TestDataPath("json_schema_golden.json"));
  ASSERT_TRUE(in.good());
  const auto cases = nlohmann::json::parse(in);
  int texts = 0, valid = 0, wrong = 0;
  for (const auto& c : cases) {
    const std::string schema = c.at("schema");
    auto g = FromSchema(schema);
    ASSERT_NE(g, nullptr) << schema;
    for (const auto& t : c.at("texts")) {
      const std::string text = t.at(0);
      const bool expected = t.at(1);
      ++texts;
      valid += expected;
      if (Matches(g, text) != expected && ++wrong <= 20) {
        ADD_FAILURE() << "schema " << schema << "\ntext " << text << "\njsonschema says "
                      << (expected ? "valid" : "invalid");
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << texts;
  EXPECT_GE(cases.size(), 100u);
  EXPECT_GT(valid, texts / 4);
  EXPECT_LT(valid, texts * 3 / 4);
}

TEST(JsonSchemaToGbnf, ErrorsNameTheKeywordAndWhere) {
  EXPECT_THAT(
      SchemaError(
          R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})"),
      HasSubstr("schema.properties.n: keyword 'multipleOf' is not supported"));
  EXPECT_THAT(SchemaError(R"({"not": {"type": "string"}})"), HasSubstr("keyword 'not'"));
  EXPECT_THAT(SchemaError(R"({"$ref": "#/$defs/missing"})"), HasSubstr("points at nothing"));
  EXPECT_THAT(SchemaError(R"({"$ref": "https://example.com/s.json"})"), HasSubstr("not local"));
  EXPECT_THAT(SchemaError("false"), HasSubstr("accepts nothing"));
  EXPECT_THAT(SchemaError(R"({"type": "strin"})"), HasSubstr("'strin' is not a JSON Schema type"));
  EXPECT_THAT(SchemaError(R"j({"type": "string", "pattern": "(?=x)"})j"),
              HasSubstr("schema.pattern: regex: the pattern uses '(?="));
  EXPECT_THAT(SchemaError(R"({"type": "array", "minItems": 3, "maxItems": 2})"),
              HasSubstr("below minItems"));
  EXPECT_THAT(SchemaError(R"({"type": "string", "maxLength": 100000})"), HasSubstr("above 1000"));
  EXPECT_THAT(SchemaError(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
              HasSubstr("no integer"));
  EXPECT_THAT(SchemaError(R"({"type": "number", "minimum": 0.5})"), HasSubstr("not integers"));
  EXPECT_THAT(SchemaError(R"({"required": ["x"], "additionalProperties": false})"),
              HasSubstr("required property 'x'"));
  EXPECT_THAT(SchemaError(R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})"),
              HasSubstr("allOf"));
  EXPECT_THAT(SchemaError(R"({"type": "object", "anyOf": [{"required": ["a"]}]})"),
              HasSubstr("'type' beside anyOf"));
  EXPECT_THAT(SchemaError("{\"type\": "), HasSubstr("json schema:"));
  EXPECT_THAT(SchemaError("[1]"), HasSubstr("must be an object or a boolean"));
  // A schema whose only instances are infinitely deep.
  auto gbnf = JsonSchemaToGbnf(
      R"({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                                  "required": ["x"]}}, "$ref": "#/$defs/a"})");
  ASSERT_TRUE(gbnf.ok());
  auto g = Grammar::Compile(*gbnf);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("accepts no string"));
}

// Hostile schemas stay cheap and bounded: nested additionalProperties that each
// require an unlisted name (compiled once per level, not once per name), deep nesting,
// wide objects, bounds at the edge of 18 digits.
TEST(JsonSchemaToGbnf, HostileSchemasAreBounded) {
  std::string nested = R"({"type": "integer"})";
  for (int i = 0; i < 40; ++i) {
    nested = R"({"required": ["a", "b"], "additionalProperties": )" + nested + "}";
  }
  auto gbnf = JsonSchemaToGbnf(nested);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_LT(gbnf->size(), 200000u);
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_THAT(SchemaError(R"({"enum": )" + deep + "}"), HasSubstr("nests deeper than 64"));
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 1";
  EXPECT_THAT(SchemaError(wide + "}"), HasSubstr("more than 4096 members"));
  std::string items = R"({"type": "array", "prefixItems": [)";
  for (int i = 0; i < 101; ++i) items += i ? ", {}" : "{}";
  EXPECT_THAT(SchemaError(items + "]}"), HasSubstr("prefixItems with more than 100"));
  EXPECT_THAT(SchemaError(R"({"type": "integer", "minimum": 1000000000000000000})"),
              HasSubstr("beyond 18 digits"));
  EXPECT_THAT(SchemaError(R"({"type": "integer", "maximum": -1000000000000000000})"),
              HasSubstr("beyond 18 digits"));
  // The largest bounds: exact, and a grammar that accepts exactly the numbers between.
  auto g = FromSchema(
      R"({"type": "integer", "minimum": 999999999999999990, "maximum": 999999999999999999})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "999999999999999990"));
  EXPECT_TRUE(Matches(g, "999999999999999999"));
  EXPECT_FALSE(Matches(g, "999999999999999989"));
  EXPECT_FALSE(Matches(g, ""));
  // Nothing lies above the largest bound: refused, not an empty value.
  EXPECT_FALSE(
      Grammar::Compile(
          *JsonSchemaToGbnf(R"({"type": "integer", "exclusiveMinimum": 999999999999999999})"))
          .ok());
  auto inside = FromSchema(R"({"type": "object", "properties": {"n": {"anyOf": [
      {"type": "integer", "exclusiveMinimum": 999999999999999999}, {"type": "null"}]}}, "required": ["n"]})");
  ASSERT_NE(inside, nullptr);
  EXPECT_TRUE(Matches(inside, R"({"n": null})"));
  EXPECT_FALSE(Matches(inside, R"({"n": })"));
}

TEST(AnyJsonGbnf, ObjectsOrAnyValue) {
  auto any = Grammar::Compile(AnyJsonGbnf(false));
  auto object = Grammar::Compile(AnyJsonGbnf(true));
  ASSERT_TRUE(any.ok() && object.ok());
  auto a = std::make_shared<const Grammar>(*std::move(any));
  auto o = std::make_shared<const Grammar>(*std::move(object));
  EXPECT_TRUE(Matches(a, "[1, \"x\", {\"k\": null}]"));
  EXPECT_TRUE(Matches(o, "{\"k\": [true, -0.5e3]}"));
  EXPECT_FALSE(Matches(o, "[1]"));
  EXPECT_FALSE(Matches(a, "{\"k\": }"));
}

}  // namespace
}  // namespace tandem::grammar
