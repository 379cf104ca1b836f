#include "common/tokenizer/detokenizer.h"

#include <random>

#include "common/tokenizer/byte_level_bpe.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/utf8.h"
#include "gtest/gtest.h"
#include "tests/gguf_builder.h"
#include "tests/test_paths.h"

namespace tandem::tokenizer {
namespace {

// A byte-level vocabulary whose token i is byte i, so tests can feed raw bytes.
class ByteVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b)
      tokens.emplace_back(GetByteAlphabet().Spell(static_cast<uint8_t>(b)));
    ::tandem::testing::GgufBuilder builder;
    builder.String("tokenizer.ggml.model", "gpt2")
        .StringArray("tokenizer.ggml.tokens", tokens)
        .StringArray("tokenizer.ggml.merges", {});
    bytes_ = builder.Build();
    auto f =
        model::GgufFile::Parse({reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size()});
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = std::move(*f);
    auto t = Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(*t);
  }
  // Pushes bytes one token each; returns what was emitted after each push.
  std::vector<std::string> Stream(Detokenizer& d, std::string_view bytes) {
    std::vector<std::string> out;
    for (char c : bytes) out.push_back(*d.Push(static_cast<uint8_t>(c)));
    return out;
  }
  std::string bytes_;
  std::unique_ptr<model::GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(ByteVocab, HoldsBackIncompleteCharacters) {
  Detokenizer d(*tok_);
  auto out = Stream(d,
                    "a\xE4\xB8\xAD"
                    "b");  // a 中 b
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "\xE4\xB8\xAD", "b"}));
  EXPECT_EQ(d.Finish(), "");
}

TEST_F(ByteVocab, ReplacesBytesThatCanNeverBeValid) {
  Detokenizer d(*tok_);
  // A truncated 3-byte sequence followed by ASCII is one U+FFFD (maximal subpart),
  // then the ASCII.
  EXPECT_EQ(Stream(d,
                   "\xE4\xB8"
                   "x"),
            (std::vector<std::string>{"", "", "\xEF\xBF\xBDx"}));
  EXPECT_EQ(Stream(d, "\xFF"), (std::vector<std::string>{"\xEF\xBF\xBD"}));
  // Overlong lead E0 80: two replacement characters, as Python decodes it.
  EXPECT_EQ(Stream(d, "\xE0\x80"), (std::vector<std::string>{"", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  EXPECT_EQ(Stream(d, "\xF0\x9F"), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(d.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST_F(ByteVocab, RandomSplitsOfValidTextReassembleExactly) {
  std::mt19937 rng(7);
  const std::vector<uint32_t> pool = {'a', ' ', 0xE9, 0x4E2D, 0x1F600, 0x10FFFF, 0x7FF, 0x800};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int i = 0; i < 20; ++i) utf8::AppendCodepoint(pool[rng() % pool.size()], &text);
    Detokenizer d(*tok_);
    std::string joined;
    for (const auto& piece : Stream(d, text)) {
      EXPECT_TRUE(utf8::IsValid(piece));
      joined += piece;
    }
    joined += d.Finish();
    EXPECT_EQ(joined, text);
  }
}

TEST_F(ByteVocab, RandomBytesAlwaysGiveValidUtf8) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes;
    for (int i = 0; i < 16; ++i) bytes.push_back(static_cast<char>(rng() & 0xFF));
    Detokenizer d(*tok_);
    std::string joined;
    for (const auto& piece : Stream(d, bytes)) joined += piece;
    joined += d.Finish();
    EXPECT_TRUE(utf8::IsValid(joined));
    // Valid input passes through unchanged.
    if (utf8::IsValid(bytes)) {
      EXPECT_EQ(joined, bytes);
    }
  }
}

TEST(Detokenizer, StreamsEmojiSplitAcrossRealTokens) {
  auto f = model::GgufFile::Open(::tandem::testing::DefaultModelPath());
  ASSERT_TRUE(f.ok()) << f.status();
  auto tok = Tokenizer::FromGguf(**f);
  ASSERT_TRUE(tok.ok());
  const std::string text = "Hi 👋🏽 — 你好, café!";
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok());
  Detokenizer d(**tok);
  std::string joined;
  int held = 0;
  for (int32_t id : *ids) {
    std::string piece = *d.Push(id);
    EXPECT_TRUE(utf8::IsValid(piece));
    if (d.pending_bytes() > 0) ++held;
    joined += piece;
  }
  EXPECT_GT(held, 0) << "expected at least one character split across tokens";
  EXPECT_EQ(joined + d.Finish(), text);
}

}  // namespace
}  // namespace tandem::tokenizer
