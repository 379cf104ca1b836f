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

// Collects what the assembler sends.
class RecordingSink : public ResponseSink {
 public:
  void OnChunk(OutputChunk chunk) override { chunks.push_back(std::move(chunk)); }
  void OnComplete(const Completion&) override {}
  void OnError(const absl::Status&) override {}
  std::vector<OutputChunk> chunks;
};

// With tools, the assembler takes the calls out of the text for every front: streaming,
// a call arrives in the chunk that completes it and its text never shows; whole, one
// chunk carries the content and the calls; the completion says calls were made.
TEST_F(TextStreamTest, ToolCallsLeaveTheTextAndReachTheSink) {
  const std::string text =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>";
  const auto ids = *tok_->Encode(text);
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streaming" : "whole");
    RequestSpec spec;
    spec.stream = stream;
    spec.parse_tool_calls = true;
    spec.tool_format = ToolCallFormat::kHermes;
    spec.tool_names = {"get_weather"};
    RecordingSink sink;
    ResponseAssembler a(*tok_, /*eos_token_id=*/2, spec, &sink);
    for (int32_t id : ids) {
      ASSERT_TRUE(a.Add(std::vector<int32_t>{id}, {}, engine::FinishReason::kNone));
    }
    Completion done;
    a.Finish(engine::FinishReason::kStop, &done);
    std::string content;
    std::vector<tokenizer::ToolCall> calls;
    size_t chunk_with_call = 0;
    for (size_t i = 0; i < sink.chunks.size(); ++i) {
      content += sink.chunks[i].text;
      for (const auto& c : sink.chunks[i].tool_calls) {
        calls.push_back(c);
        chunk_with_call = i;
      }
    }
    EXPECT_EQ(content, "Checking.");
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_TRUE(done.tool_calls);
    if (stream) {
      EXPECT_EQ(chunk_with_call, ids.size() - 1);  // the token that closed the call
    } else {
      EXPECT_EQ(sink.chunks.size(), 1u);
    }
  }
  // Without tools the same text is all content.
  RequestSpec plain;
  RecordingSink sink;
  ResponseAssembler a(*tok_, 2, plain, &sink);
  a.Add(ids, {}, engine::FinishReason::kNone);
  Completion done;
  a.Finish(engine::FinishReason::kStop, &done);
  std::string content;
  for (const auto& c : sink.chunks) content += c.text;
  EXPECT_EQ(content, text);
  EXPECT_FALSE(done.tool_calls);
}

}  // namespace
}  // namespace tandem::router
