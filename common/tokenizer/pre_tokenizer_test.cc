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
  for (const char* name : {"gpt2", "smollm", "llama3", "qwen2"}) {
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
