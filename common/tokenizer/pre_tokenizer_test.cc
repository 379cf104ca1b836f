#include "common/tokenizer/pre_tokenizer.h"

#include <random>

#include "common/util/strings.h"
#include "common/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(std::string_view name, std::string_view text) {
  auto pt = PreTokenizer::ForName(name);
  EXPECT_TRUE(pt.ok()) << pt.status();
  std::vector<std::string_view> pieces;
  (*pt)->Split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_THAT(Split("gpt2", "Hello world's  test 123"),
              ElementsAre("Hello", " world", "'s", " ", " test", " 123"));
  EXPECT_THAT(Split("gpt2", "a\n\n  b  "), ElementsAre("a", "\n\n ", " b", "  "));
}

TEST(PreTokenizer, SmolLmSplitsEveryDigit) {
  EXPECT_THAT(Split("smollm", "x 2024!"), ElementsAre("x", " ", "2", "0", "2", "4", "!"));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_THAT(Split("llama3", "1234567 I'M"), ElementsAre("123", "456", "7", " I", "'M"));
}

TEST(PreTokenizer, Qwen2) {
  EXPECT_THAT(Split("qwen2", "ab12\r\n"), ElementsAre("ab", "1", "2", "\r\n"));
}

TEST(PreTokenizer, DeepSeekLlmChainsSixSplits) {
  // Newlines alone, letter runs with one leading space, punctuation runs, trailing
  // white space, CJK runs, digit runs.
  EXPECT_THAT(Split("deepseek-llm", "Hi, 世界 42\n!! "),
              ElementsAre("Hi", ",", " ", "世界", " ", "42", "\n", "!!", " "));
}

TEST(PreTokenizer, DeepSeekCoderSplitsEveryDigit) {
  EXPECT_THAT(Split("deepseek-coder", "x=12;"), ElementsAre("x", "=", "1", "2", ";"));
}

TEST(PreTokenizer, FalconSplitsPunctuationRunsThenSpelledDigits) {
  // Punctuation runs first (ASCII symbols count), GPT-2 splitting, then digit runs
  // cut into threes, ASCII only ("٣" is not an ASCII digit).
  EXPECT_THAT(Split("falcon", "a+=b 1234567"), ElementsAre("a", "+=", "b", " ", "123", "456", "7"));
  EXPECT_THAT(Split("falcon", "x ٣٤"), ElementsAre("x", " ٣٤"));
  // "½" is C2 BD; its spelled form "Â½" holds the numeric ½, so the byte step cuts the
  // character between its two bytes, as Hugging Face's Digits does after ByteLevel.
  EXPECT_THAT(Split("falcon", "4½"), ElementsAre("4", "\xC2", "\xBD"));
}

TEST(PreTokenizer, TekkenSplitsAtCaseChanges) {
  // A word is capitals then lower case: a capital after lower case starts the next.
  EXPECT_THAT(Split("tekken", "HelloWorld XMLHttp"), ElementsAre("Hello", "World", " XMLHttp"));
}

TEST(PreTokenizer, WhiteSpaceIsUnicodeWhiteSpace) {
  // U+3000 is White_Space; U+180E (which PCRE2's \s would accept) is not.
  EXPECT_THAT(Split("gpt2",
                    "a\xE3\x80\x80"
                    "b"),
              ElementsAre("a", "\xE3\x80\x80", "b"));
  EXPECT_THAT(Split("gpt2",
                    "a\xE1\xA0\x8E"
                    "b"),
              ElementsAre("a", "\xE1\xA0\x8E", "b"));
}

TEST(PreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(3);
  const std::vector<uint32_t> pool = {'a', 'Z',  '1',  ' ',    '\n',    '\t',   '\'',
                                      '!', 0xA0, 0xE9, 0x4E2D, 0x1F600, 0x3000, 0x2028};
  for (const char* name : {"gpt2", "smollm", "llama3", "qwen2", "qwen35", "tekken", "gpt-4o",
                           "deepseek-llm", "deepseek-coder", "falcon", "mpt"}) {
    for (int trial = 0; trial < 100; ++trial) {
      std::string text;
      for (int i = 0; i < 30; ++i) utf8::AppendCodepoint(pool[rng() % pool.size()], &text);
      auto pieces = Split(name, text);
      EXPECT_EQ(Join(pieces, ""), text) << name;
      for (const auto& p : pieces) EXPECT_FALSE(p.empty());
    }
  }
}

TEST(PreTokenizer, UnknownNameIsUnimplemented) {
  EXPECT_EQ(PreTokenizer::ForName("klingon").status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tandem::tokenizer
