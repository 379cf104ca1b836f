#include "common/tokenizer/jinja/lexer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer::jinja {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The text tokens only: what whitespace control leaves of the template text.
std::vector<std::string> Texts(std::string_view source) {
  std::vector<std::string> out;
  auto tokens = Tokenize(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return out;
  for (const Token& t : *tokens) {
    if (t.kind == TokenKind::kText) out.push_back(t.text);
  }
  return out;
}

std::vector<std::string> Inside(std::string_view source) {
  std::vector<std::string> out;
  auto tokens = Tokenize(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return out;
  for (const Token& t : *tokens) {
    if (t.kind != TokenKind::kText && t.kind != TokenKind::kEnd) out.push_back(t.text);
  }
  return out;
}

TEST(Lexer, TagsAndTokens) {
  EXPECT_THAT(Inside("{{ a.b[0] | f('s', 1.5) ~ x // 2 ** -y != z }}"),
              ElementsAre("{{", "a", ".", "b", "[", "0", "]", "|", "f", "(", "s", ",", "1.5", ")",
                          "~", "x", "//", "2", "**", "-", "y", "!=", "z", "}}"));
  EXPECT_THAT(Inside("{%- if x -%}"), ElementsAre("{%", "if", "x", "%}"));
  // `}}` inside a string or a dict literal does not end the tag.
  EXPECT_THAT(Inside("{{ {'a': {'b': '}}'}} }}"),
              ElementsAre("{{", "{", "a", ":", "{", "b", ":", "}}", "}", "}", "}}"));
}

TEST(Lexer, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_THAT(Texts("{% if x %}\nA\n{% endif %}\nB"), ElementsAre("A\n", "B"));
  EXPECT_THAT(Texts("{{ x }}\nA"), ElementsAre("\nA"));  // not after {{ }}
  EXPECT_THAT(Texts("{% if x +%}\nA{% endif %}"), ElementsAre("\nA"));
  EXPECT_THAT(Texts("{# c #}\nA"), ElementsAre("A"));
}

TEST(Lexer, LstripBlocksDropsIndentationBeforeABlockTag) {
  EXPECT_THAT(Texts("A\n   \t{% if x %}B"), ElementsAre("A\n", "B"));
  EXPECT_THAT(Texts("   {% if x %}B"), ElementsAre("B"));         // the start is a line start
  EXPECT_THAT(Texts("A  {% if x %}B"), ElementsAre("A  ", "B"));  // not alone on its line
  EXPECT_THAT(Texts("A\n  {{ x }}"), ElementsAre("A\n  "));       // not before {{ }}
  EXPECT_THAT(Texts("A\n  {%+ if x %}"), ElementsAre("A\n  "));
  EXPECT_THAT(Texts("{% if x %}\n  {% if y %}"), ElementsAre());
  EXPECT_THAT(Texts("{{ x }}  {% if y %}"), ElementsAre("  "));
}

TEST(Lexer, MinusStripsAllWhitespace) {
  EXPECT_THAT(Texts("A \n\t {%- if x -%} \n\n B"), ElementsAre("A", "B"));
  EXPECT_THAT(Texts("A \n {{- x -}} \n B"), ElementsAre("A", "B"));
  EXPECT_THAT(Texts("A\u00a0{{- x }}"), ElementsAre("A"));  // Python's whitespace
}

TEST(Lexer, NewlinesAreNormalizedAndTheLastOneDropped) {
  EXPECT_THAT(Texts("A\r\nB\rC\n"), ElementsAre("A\nB\nC"));
  EXPECT_THAT(Texts("A\n\n"), ElementsAre("A\n"));
}

TEST(Lexer, RawBlocks) {
  EXPECT_THAT(Texts("{% raw %}{{ x }}{% endraw %}"), ElementsAre("{{ x }}"));
  EXPECT_THAT(Texts("{%- raw -%} \n {% if %} \n {%- endraw %}\nA"), ElementsAre("{% if %}", "A"));
}

TEST(Lexer, StringEscapesArePythons) {
  auto tokens = Tokenize(R"({{ 'a\n\t\\\'\x41\u00e9\U0001F600\101\q' "say \"hi\"" }})");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[1].text, "a\n\t\\'A\u00e9\U0001F600A\\q");
  EXPECT_EQ((*tokens)[2].text, "say \"hi\"");
}

TEST(Lexer, ErrorsNameLineAndColumn) {
  auto code_and_message = [](std::string_view source) {
    auto t = Tokenize(source);
    EXPECT_FALSE(t.ok()) << source;
    return std::string(t.status().message());
  };
  EXPECT_THAT(code_and_message("ab\n{{ 'open }}"),
              HasSubstr("line 2, column 4: unterminated string"));
  EXPECT_THAT(code_and_message("{# never closed"),
              HasSubstr("line 1, column 1: missing end of comment"));
  EXPECT_THAT(code_and_message("{{ x"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(code_and_message("{{ x ) }}"), HasSubstr("line 1, column 6: unexpected ')'"));
  EXPECT_THAT(code_and_message("{{ x $ }}"), HasSubstr("unexpected character '$'"));
  EXPECT_THAT(code_and_message("{{ '\\x4' }}"), HasSubstr("truncated"));
  EXPECT_THAT(code_and_message("{% raw %}never ended"), HasSubstr("missing end of raw"));
}

}  // namespace
}  // namespace tandem::tokenizer::jinja
