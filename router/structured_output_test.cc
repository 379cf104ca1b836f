#include "router/structured_output.h"

#include <memory>

#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/util/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

bool Accepts(const std::string& gbnf, std::string_view text) {
  auto g = grammar::Grammar::Compile(gbnf);
  if (!g.ok()) return false;
  grammar::GrammarMatcher m(std::make_shared<const grammar::Grammar>(*std::move(g)));
  return m.Accept(text) && m.CanEnd();
}

TEST(StructuredOutput, EachKindBecomesOneGrammar) {
  v1::SamplingParams s;
  EXPECT_EQ(*StructuredOutputGbnf(s), "");
  s.set_json_object(true);
  EXPECT_TRUE(Accepts(*StructuredOutputGbnf(s), R"({"a": [1, null]})"));
  EXPECT_FALSE(Accepts(*StructuredOutputGbnf(s), "[1]"));
  s.set_json_schema(R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 2})");
  EXPECT_TRUE(Accepts(*StructuredOutputGbnf(s), "[true, false]"));
  EXPECT_FALSE(Accepts(*StructuredOutputGbnf(s), "[true, false, true]"));
  s.set_regex("(ab)+c");
  EXPECT_TRUE(Accepts(*StructuredOutputGbnf(s), "ababc"));
  EXPECT_FALSE(Accepts(*StructuredOutputGbnf(s), "abab"));
  s.mutable_choice()->add_choices("red \"one\"");
  s.mutable_choice()->add_choices("blue");
  EXPECT_TRUE(Accepts(*StructuredOutputGbnf(s), "red \"one\""));
  EXPECT_FALSE(Accepts(*StructuredOutputGbnf(s), "red"));
  s.set_grammar("root ::= [a-c]{2}");
  EXPECT_TRUE(Accepts(*StructuredOutputGbnf(s), "ca"));
}

TEST(StructuredOutput, BadSourcesNameTheField) {
  auto error = [](const v1::SamplingParams& s) {
    auto r = StructuredOutputGbnf(s);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::make_pair(ErrorField(r.status()).value_or(""), std::string(r.status().message()));
  };
  v1::SamplingParams s;
  s.set_json_schema(R"({"type": "string", "not": {}})");
  EXPECT_EQ(error(s).first, "json_schema");
  EXPECT_THAT(error(s).second, HasSubstr("keyword 'not'"));
  s.set_json_schema("{broken");
  EXPECT_EQ(error(s).first, "json_schema");
  s.set_json_schema("false");
  EXPECT_THAT(error(s).second, HasSubstr("accepts nothing"));
  s.set_regex("(?<=a)b");
  EXPECT_EQ(error(s).first, "regex");
  s.set_grammar("root ::= root \"x\" | \"y\"");
  EXPECT_EQ(error(s).first, "grammar");
  EXPECT_THAT(error(s).second, HasSubstr("left-recursive"));
  s.set_grammar("root ::= \"a\" root");
  EXPECT_THAT(error(s).second, HasSubstr("accepts no string"));
  s.mutable_choice();
  EXPECT_EQ(error(s).first, "choice");
  s.mutable_choice()->add_choices("");
  EXPECT_THAT(error(s).second, HasSubstr("choice 0 is empty"));
}

}  // namespace
}  // namespace tandem::router
