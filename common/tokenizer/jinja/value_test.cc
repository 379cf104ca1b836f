#include "common/tokenizer/jinja/value.h"

#include <string>

#include "common/tokenizer/jinja/py_string.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer::jinja {
namespace {

using ::testing::ElementsAre;

std::string Str(const Value& v) {
  std::string out;
  EXPECT_TRUE(AppendStr(v, &out, 1 << 20).ok());
  return out;
}

std::string Json(const Value& v, int indent = -1) {
  std::string out;
  EXPECT_TRUE(AppendJson(v, indent, &out, 1 << 20).ok());
  return out;
}

TEST(Value, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(-0.0), "-0.0");
  EXPECT_EQ(FormatFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatFloat(123456.789), "123456.789");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatFloat(2.5e-7), "2.5e-07");
  EXPECT_EQ(FormatFloat(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatFloat(1.0 / 0.0), "inf");
}

TEST(Value, StrAndReprArePythons) {
  const Value list = Value::List({Value::Int(1), Value::String("it's"), Value::None(),
                                  Value::Bool(false), Value::Float(2.0), Value::String("a\n\"")});
  EXPECT_EQ(Str(list), R"([1, "it's", None, False, 2.0, 'a\n"'])");
  EXPECT_EQ(
      Str(Value::Dict({{"k", Value::List({}, true)}, {"t", Value::List({Value::Int(1)}, true)}})),
      "{'k': (), 't': (1,)}");
  EXPECT_EQ(Str(Value()), "");
  EXPECT_EQ(py::Repr("tab\tnbsp\u00a0zwsp\u200b\x01"), "'tab\\tnbsp\\xa0zwsp\\u200b\\x01'");
}

TEST(Value, JsonIsJsonDumpsWithoutAsciiEscaping) {
  const Value v =
      Value::Dict({{"s", Value::String("é\"\\\n\x01</")},
                   {"l", Value::List({Value::Int(1), Value::Float(0.5), Value::None()})},
                   {"e", Value::Dict({})}});
  EXPECT_EQ(Json(v), R"({"s": "é\"\\\n\u0001</", "l": [1, 0.5, null], "e": {}})");
  EXPECT_EQ(Json(v, 2),
            "{\n  \"s\": \"é\\\"\\\\\\n\\u0001</\",\n  \"l\": [\n    1,\n    0.5,\n    null\n  ],\n"
            "  \"e\": {}\n}");
  std::string out;
  EXPECT_FALSE(AppendJson(Value(), -1, &out, 100).ok());
  EXPECT_EQ(AppendJson(Value::String(std::string(200, 'x')), -1, &out, 100).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(Value, EqualityAndOrder) {
  int64_t work = 1000;
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0), &work));
  EXPECT_TRUE(Equals(Value::Int(1), Value::Bool(true), &work));
  EXPECT_FALSE(Equals(Value::Int(1), Value::String("1"), &work));
  EXPECT_TRUE(Equals(Value::Dict({{"a", Value::Int(1)}, {"b", Value::Int(2)}}),
                     Value::Dict({{"b", Value::Int(2)}, {"a", Value::Int(1)}}), &work));
  EXPECT_FALSE(Equals(Value::List({Value::Int(1)}), Value::List({Value::Int(1)}, true), &work));
  EXPECT_TRUE(Equals(Value(), Value::Undefined("x"), &work));
  EXPECT_EQ(*Compare(Value::String("a"), Value::String("b"), &work), -1);
  EXPECT_EQ(
      *Compare(Value::List({Value::Int(1), Value::Int(2)}), Value::List({Value::Int(1)}), &work),
      1);
  EXPECT_FALSE(Compare(Value::Int(1), Value::String("a"), &work).ok());
  // Comparing stops once the work budget is spent.
  work = 3;
  const Value big = Value::List(ValueList(100, Value::Int(1)));
  Equals(big, Value::List(ValueList(100, Value::Int(1))), &work);
  EXPECT_LT(work, 0);
}

TEST(Value, TruthinessIsPythons) {
  for (const Value& v : {Value(), Value::None(), Value::Bool(false), Value::Int(0), Value::Float(0),
                         Value::String(""), Value::List({}), Value::Dict({})}) {
    EXPECT_FALSE(Truthy(v)) << TypeName(v);
  }
  for (const Value& v : {Value::Bool(true), Value::Int(-1), Value::Float(0.5), Value::String(" "),
                         Value::List({Value::None()}), Value::NewNamespace({})}) {
    EXPECT_TRUE(Truthy(v)) << TypeName(v);
  }
}

TEST(Value, DepthCountsNesting) {
  EXPECT_EQ(Value::Int(1).depth(), 0);
  EXPECT_EQ(Value::List({}).depth(), 1);
  EXPECT_EQ(Value::Dict({{"a", Value::List({Value::List({})})}}).depth(), 3);
}

TEST(PyString, StripSplitAndLengthCountCodePoints) {
  EXPECT_EQ(py::Strip("\u3000\u00a0 x y \t\n\u2003", true, true), "x y");
  EXPECT_EQ(py::Strip(" x ", true, false), "x ");
  EXPECT_EQ(py::StripChars("ééxéa", "éa", true, true), "x");
  EXPECT_EQ(py::Length("héllo😀"), 6u);
  EXPECT_THAT(py::Split(" a\u3000b  c ", "", -1), ElementsAre("a", "b", "c"));
  EXPECT_THAT(py::Split("a  b  c  ", "", 1), ElementsAre("a", "b  c  "));
  EXPECT_THAT(py::Split("a,,b", ",", -1), ElementsAre("a", "", "b"));
  EXPECT_EQ(py::Title("hello wORLD 1st"), "Hello World 1St");
  EXPECT_EQ(py::Capitalize("hELLO"), "Hello");
  // Invalid UTF-8 is taken byte by byte.
  EXPECT_EQ(py::Length("\xff\xc3"), 2u);
  EXPECT_EQ(py::Strip("\xe3\x80 x", true, true), "\xe3\x80 x");
}

}  // namespace
}  // namespace tandem::tokenizer::jinja
