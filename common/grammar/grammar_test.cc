#include "common/grammar/grammar.h"

#include <memory>
#include <string>

#include "common/grammar/grammar_matcher.h"
#include "common/grammar/grammar_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::grammar {
namespace {

using ::testing::HasSubstr;

std::string CompileError(std::string_view gbnf) {
  auto g = Grammar::Compile(gbnf);
  EXPECT_FALSE(g.ok()) << gbnf;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(Grammar, LiteralsClassesAndAlternatives) {
  auto g = MustCompile(R"gbnf(
    root   ::= answer ("," ws answer)*   # comma-separated
    answer ::= "yes" | "no" | [0-9]+
    ws     ::= [ \t]*
  )gbnf");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"yes", "no", "42", "yes,no", "yes, \t7,no"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad : {"", "ye", "yes,", "maybe", "yes ,no", "4a"}) {
    EXPECT_FALSE(Matches(g, bad)) << bad;
  }
}

TEST(Grammar, RulesSpanLinesOnlyInsideParenthesesOrAfterBars) {
  auto g = MustCompile("root ::= (\n  \"a\"\n  \"b\"\n) |\n  \"c\"\nother ::= \"d\"\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "ab"));
  EXPECT_TRUE(Matches(g, "c"));
  EXPECT_FALSE(Matches(g, "d"));
}

TEST(Grammar, RepetitionBounds) {
  auto g = MustCompile(R"gbnf(root ::= "x"{2,4} "y"{3} "z"{,1} "w"{2,})gbnf");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "xxyyyww"));
  EXPECT_TRUE(Matches(g, "xxxxyyyzwwwww"));
  EXPECT_FALSE(Matches(g, "xyyyww"));
  EXPECT_FALSE(Matches(g, "xxxxxyyyww"));
  EXPECT_FALSE(Matches(g, "xxyyww"));
  EXPECT_FALSE(Matches(g, "xxyyyzzww"));
  EXPECT_FALSE(Matches(g, "xxyyyw"));
}

// Classes are sets of code points, matched as their UTF-8 bytes: multi-byte characters
// in and out of ranges, negation, and `.`, which never lets ill-formed UTF-8 through.
TEST(Grammar, ClassesAreCodePointsInUtf8) {
  auto g = MustCompile(R"gbnf(root ::= "\"" [^"\\]* "\"")gbnf");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "\"héllo 世界 😀\""));
  EXPECT_FALSE(Matches(g, "\"a\"b\""));
  EXPECT_FALSE(Matches(g, "\"\xC3\""));              // a truncated sequence
  EXPECT_FALSE(Matches(g, "\"\xC0\x80\""));          // overlong
  EXPECT_FALSE(Matches(g, "\"\xED\xA0\x80\""));      // a surrogate
  EXPECT_FALSE(Matches(g, "\"\xF4\x90\x80\x80\""));  // above U+10FFFF

  auto greek =
      MustCompile(R"gbnf(root ::= [α-ω]+ | [\u4E00-\u4E8F] | [\U0001F600-\U0001F64F])gbnf");
  ASSERT_NE(greek, nullptr);
  EXPECT_TRUE(Matches(greek, "αβγω"));
  EXPECT_FALSE(Matches(greek, "Ω"));  // U+03A9, below the range
  EXPECT_TRUE(Matches(greek, "一"));  // U+4E00
  EXPECT_TRUE(Matches(greek, "世"));  // U+4E16
  EXPECT_FALSE(Matches(greek, "\u4E90"));
  EXPECT_TRUE(Matches(greek, "😀"));
  EXPECT_FALSE(Matches(greek, "😀😀"));

  auto any = MustCompile("root ::= .{3}");
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(Matches(any, "a世😀"));
  EXPECT_FALSE(Matches(any, "ab"));
  EXPECT_FALSE(Matches(any, "ab\xFF"));
}

TEST(Grammar, EscapesInLiterals) {
  auto g = MustCompile(R"gbnf(root ::= "\x41\u00e9\U0001F600\n\t\"\\")gbnf");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "Aé😀\n\t\"\\"));
}

// Nullable loops do not make expansion run forever; right recursion is fine.
TEST(Grammar, NullableLoopsAndRecursion) {
  auto g = MustCompile(R"gbnf(
    root ::= ("a"?)* nest
    nest ::= "(" nest ")" | ""
  )gbnf");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, ""));
  EXPECT_TRUE(Matches(g, "aaa((()))"));
  EXPECT_FALSE(Matches(g, "aa(()"));
  EXPECT_FALSE(Matches(g, "a)"));
  // 5000 levels deep: the stack is data, not recursion.
  std::string deep = std::string(5000, '(') + std::string(5000, ')');
  EXPECT_TRUE(Matches(g, deep));
}

// An alternative that can never end (a rule without a finite string, an empty class)
// is dropped: no byte ever leads into a dead end.
TEST(Grammar, AlternativesThatCannotEndAreDropped) {
  auto g = MustCompile(R"gbnf(
    root ::= "a" | "b" loop | "c" [^\x00-\U0010FFFF] | "d"
    loop ::= "x" loop
  )gbnf");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.Accept('b'));
  EXPECT_FALSE(m.Accept('c'));
  EXPECT_TRUE(Matches(g, "a"));
  EXPECT_TRUE(Matches(g, "d"));
}

TEST(Grammar, ErrorsNameTheRuleOrPlace) {
  EXPECT_THAT(CompileError("root ::= item\n"), HasSubstr("rule 'item' is used but not defined"));
  EXPECT_THAT(CompileError("start ::= \"a\"\n"), HasSubstr("there is no rule 'root'"));
  EXPECT_THAT(CompileError("root ::= root \"a\" | \"b\"\n"), HasSubstr("'root' is left-recursive"));
  EXPECT_THAT(CompileError("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"\n"),
              HasSubstr("'x' is left-recursive"));
  EXPECT_THAT(CompileError("root ::= \"a\" root\n"), HasSubstr("accepts no string"));
  EXPECT_THAT(CompileError("root ::= [^\\x00-\\U0010FFFF]\n"), HasSubstr("accepts no string"));
  EXPECT_THAT(CompileError("root ::= \"a\"\nroot ::= \"b\"\n"), HasSubstr("defined twice"));
  EXPECT_THAT(CompileError("root ::= \"abc\n"), HasSubstr("unterminated literal"));
  EXPECT_THAT(CompileError("root ::= [ab\n"), HasSubstr("unterminated character class"));
  EXPECT_THAT(CompileError("root ::= \"a\"\n  x ::= \"b\" )\n"), HasSubstr("line 2"));
  EXPECT_THAT(CompileError("root ::= \"\\q\"\n"), HasSubstr("unknown escape"));
  EXPECT_THAT(CompileError("root ::= \"\\uD800\"\n"), HasSubstr("not a Unicode scalar value"));
  EXPECT_THAT(CompileError("root ::= [z-a]\n"), HasSubstr("runs backwards"));
  EXPECT_THAT(CompileError("root ::= \"a\"{3,2}\n"), HasSubstr("below its minimum"));
  EXPECT_THAT(CompileError("root ::= \"a\"{5000}\n"), HasSubstr("above 1000"));
  EXPECT_THAT(CompileError("root ::= * \"a\"\n"), HasSubstr("follows nothing"));
  EXPECT_THAT(CompileError("root ::= \"a\" ::= \"b\"\n"), HasSubstr("expected the end"));
  EXPECT_THAT(CompileError("root \"a\"\n"), HasSubstr("expected '::='"));
  EXPECT_THAT(CompileError(std::string("root ::= \"\xFF\"\n")), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(CompileError(""), HasSubstr("there is no rule 'root'"));
}

TEST(Grammar, LiteralSpellingRoundTrips) {
  const std::string text = "quote\" back\\ nl\n tab\t bell\x07 é😀";
  auto g = MustCompile("root ::= " + GbnfLiteral(text) + "\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, text));
  EXPECT_FALSE(Matches(g, text.substr(1)));
}

}  // namespace
}  // namespace tandem::grammar
