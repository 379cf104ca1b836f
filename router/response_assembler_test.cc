#include "router/response_assembler.h"

#include "gtest/gtest.h"
#include "tests/default_tokenizer.h"

namespace tandem::router {
namespace {

class TextStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &::tandem::testing::DefaultTokenizer(); }
  // Streams `ids` one by one; returns the concatenated output (Finish included).
  static std::string Stream(TextStream& s, const std::vector<int32_t>& ids,
                            std::string* pieces = nullptr) {
    std::string out;
    for (int32_t id : ids) {
      const std::string p = s.Push(id, false);
      if (pieces != nullptr && !p.empty()) *pieces += "[" + p + "]";
      out += p;
    }
    return out + s.Finish();
  }
  static const tokenizer::Tokenizer* tok_;
};
const tokenizer::Tokenizer* TextStreamTest::tok_ = nullptr;

TEST_F(TextStreamTest, WithoutStopsItIsTheDecodedText) {
  const std::string text = "Grüße, 世界! emoji 🙂 and code: x += 1";
  const auto ids = *tok_->Encode(text);
  TextStream s(*tok_, {});
  EXPECT_EQ(Stream(s, ids), *tok_->Decode(ids));
  EXPECT_FALSE(s.stopped());
}

TEST_F(TextStreamTest, StopStringAcrossTokensIsCutAndNeverLeaks) {
  const std::string text = "The quick brown fox jumps over the lazy dog again";
  const auto ids = *tok_->Encode(text);
  for (const std::string stop : {"fox jum", "x ju", "lazy", "ag", "dog again"}) {
    SCOPED_TRACE(stop);
    TextStream s(*tok_, {"never", stop});
    std::string pieces;
    const std::string out = Stream(s, ids, &pieces);
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.stop_string(), stop);
    const std::string decoded = *tok_->Decode(ids);
    EXPECT_EQ(out, decoded.substr(0, decoded.find(stop)));
    // No released piece ever held the start of the stop string beyond the cut.
    EXPECT_EQ(pieces.find(stop), std::string::npos);
  }
}

TEST_F(TextStreamTest, HeldPrefixIsReleasedWhenTheStopDoesNotComplete) {
  const auto ids = *tok_->Encode("one two three");
  TextStream s(*tok_, {"two thousand"});
  EXPECT_EQ(Stream(s, ids), *tok_->Decode(ids));
  EXPECT_FALSE(s.stopped());
}

TEST_F(TextStreamTest, EndOfSequenceAddsNoText) {
  TextStream s(*tok_, {});
  const auto ids = *tok_->Encode("Hi");
  std::string out;
  for (int32_t id : ids) out += s.Push(id, false);
  out += s.Push(2, /*is_eos=*/true);
  out += s.Finish();
  EXPECT_EQ(out, *tok_->Decode(ids));
}

}  // namespace
}  // namespace tandem::router
