#include "common/grammar/grammar_matcher.h"

#include <memory>
#include <random>
#include <string>

#include "common/grammar/grammar_test_util.h"
#include "gtest/gtest.h"

namespace tandem::grammar {
namespace {

TEST(GrammarMatcher, ARefusedByteLeavesTheStateAlone) {
  auto g = MustCompile(R"gbnf(root ::= "ab" | "ac")gbnf");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_TRUE(m.Accept('a'));
  const GrammarMatcher::State before = m.state();
  EXPECT_FALSE(m.Accept('x'));
  EXPECT_EQ(m.state(), before);
  EXPECT_FALSE(m.Accept(std::string_view("bx")));  // all or nothing
  EXPECT_EQ(m.state(), before);
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accept('c'));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.CanContinue());
  EXPECT_FALSE(m.Accept('c'));
}

// Inside a repeated rule the state comes back to the same interned stacks, so its
// representation is equal (what mask caching relies on), and storage stops growing.
TEST(GrammarMatcher, LoopsReturnToEqualStates) {
  auto g = MustCompile(R"gbnf(
    root ::= "[" item ("," item)* "]"
    item ::= "\"" [^"]* "\""
  )gbnf");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.Accept(std::string_view("[\"ab")));
  const GrammarMatcher::State in_string = m.state();
  ASSERT_TRUE(m.Accept(std::string_view("cdefgh")));
  EXPECT_EQ(m.state(), in_string);
  ASSERT_TRUE(m.Accept(std::string_view("\",\"")));
  const GrammarMatcher::State second = m.state();
  ASSERT_TRUE(m.Accept(std::string_view("x\",\"")));
  EXPECT_EQ(m.state(), second);
}

// Ambiguity that only repeats stacks stays small: equal stacks are one.
TEST(GrammarMatcher, RepeatedParsesShareStacks) {
  auto g = MustCompile(R"gbnf(
    root ::= ("x" | "x" | "xx")* ("x" | "y")*
  )gbnf");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.Accept('x'));
  EXPECT_LE(m.state().heads.size(), 8u);
  EXPECT_FALSE(m.exhausted());
}

// An alternation far wider than kMaxHeads (an enum of 60,000 values) after a prefix:
// every value's stack is alive after the shared first byte, and the matcher takes any
// one value whole, because the limit grows with the grammar's byte elements.
TEST(GrammarMatcher, WideAlternationsAfterAPrefixDoNotExhaust) {
  constexpr int kValues = 60000;
  const std::string gbnf = WideEnumGbnf("pick: ", kValues, "");
  auto g = MustCompile(gbnf);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_GT(m.max_heads(), static_cast<size_t>(kValues));
  ASSERT_TRUE(m.Accept(std::string_view("pick: v")));
  EXPECT_EQ(m.state().heads.size(), static_cast<size_t>(kValues));
  EXPECT_FALSE(m.exhausted());
  EXPECT_FALSE(m.Accept(std::string_view("x")));
  ASSERT_TRUE(m.Accept(std::string_view("3141")));
  EXPECT_EQ(m.state().heads.size(), 10u);  // v31410 … v31419
  EXPECT_FALSE(m.Accept(std::string_view("55")));
  ASSERT_TRUE(m.Accept('5'));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.CanContinue());
}

// Ambiguity whose stacks all differ (each "a" may be closed by "b" or "c") doubles
// the state per byte; past kMaxHeads the matcher says it is exhausted and takes no more.
TEST(GrammarMatcher, ExponentialAmbiguityExhausts) {
  auto g = MustCompile(R"gbnf(
    root ::= "a" root "b" | "a" root "c" | ""
  )gbnf");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  int accepted = 0;
  while (accepted < 40 && m.Accept('a')) ++accepted;
  EXPECT_TRUE(m.exhausted());
  EXPECT_GE(accepted, 10);
  EXPECT_LT(accepted, 40);
  EXPECT_FALSE(m.Accept('b'));
}

// Random walks: every byte a matcher accepts keeps it alive, and every string built
// from accepted bytes that can end is accepted whole by a fresh matcher.
TEST(GrammarMatcher, RandomWalksAreConsistent) {
  auto g = MustCompile(R"gbnf(
    root   ::= value
    value  ::= object | array | string | number | "true" | "false" | "null"
    object ::= "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
    array  ::= "[" ws (value ws ("," ws value ws)*)? "]"
    string ::= "\"" ([^"\\] | "\\" ["\\/bfnrt])* "\""
    number ::= "-"? [0-9]+ ("." [0-9]+)?
    ws     ::= [ ]?
  )gbnf");
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":, -.0123456789truefalsnl\\abé";
  int ended = 0;
  for (int walk = 0; walk < 300; ++walk) {
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < 60; ++step) {
      const char c = alphabet[rng() % alphabet.size()];
      if (m.Accept(static_cast<uint8_t>(c))) text += c;
      if (m.CanEnd() && rng() % 4 == 0) break;
    }
    if (m.CanEnd()) {
      ++ended;
      GrammarMatcher fresh(g);
      EXPECT_TRUE(fresh.Accept(text) && fresh.CanEnd()) << text;
    }
  }
  EXPECT_GT(ended, 50);
}

}  // namespace
}  // namespace tandem::grammar
