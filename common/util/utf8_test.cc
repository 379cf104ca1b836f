#include "common/util/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem::utf8 {
namespace {

TEST(Utf8, AcceptsWellFormedSequences) {
  EXPECT_TRUE(IsValid(""));
  EXPECT_TRUE(IsValid("plain ascii"));
  EXPECT_TRUE(IsValid("\xC3\xA9"));          // é
  EXPECT_TRUE(IsValid("\xE4\xB8\xAD"));      // 中
  EXPECT_TRUE(IsValid("\xF0\x9F\x98\x80"));  // 😀
  EXPECT_TRUE(IsValid("\xF4\x8F\xBF\xBF"));  // U+10FFFF
}

TEST(Utf8, RejectsIllFormedSequences) {
  EXPECT_EQ(FirstInvalid("ab\x80"), 2u);            // lone continuation
  EXPECT_EQ(FirstInvalid("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(FirstInvalid("\xE0\x80\xAF"), 0u);      // overlong 3-byte
  EXPECT_EQ(FirstInvalid("x\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(FirstInvalid("\xF4\x90\x80\x80"), 0u);  // > U+10FFFF
  EXPECT_EQ(FirstInvalid("\xE4\xB8"), 0u);          // truncated
  EXPECT_EQ(FirstInvalid("\xFF"), 0u);
}

TEST(Utf8, EncodeDecodeRoundTripsEveryPlane) {
  for (uint32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFDu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    AppendCodepoint(cp, &s);
    size_t len = 0;
    EXPECT_EQ(DecodeCodepoint(s, &len), cp);
    EXPECT_EQ(len, s.size());
  }
}

}  // namespace
}  // namespace tandem::utf8

namespace tandem::utf8 {
namespace {

TEST(Utf8, MaximalSubparts) {
  EXPECT_EQ(MaximalSubpart(""), 0u);
  EXPECT_EQ(MaximalSubpart("a"), 1u);
  EXPECT_EQ(MaximalSubpart("\xE4\xB8\xAD"), 3u);  // complete
  EXPECT_EQ(MaximalSubpart("\xE4\xB8x"), 2u);     // truncated: one replacement for 2 bytes
  EXPECT_EQ(MaximalSubpart("\xE0\x80"), 1u);      // overlong: the lead alone
  EXPECT_EQ(MaximalSubpart("\xF0\x9F\x98"), 3u);  // could still become 😀
  EXPECT_EQ(MaximalSubpart("\xFF\x80"), 1u);
}

}  // namespace
}  // namespace tandem::utf8
