#include "common/model/token_rules.h"

#include "gtest/gtest.h"

namespace tandem::model {
namespace {

TEST(TokenRules, IdsOutsideTheVocabularyAreNamedWithTheirIndex) {
  const std::vector<int32_t> ok = {0, 5, 9};
  EXPECT_TRUE(CheckTokenIds("prompt", ok, 10).ok());
  const std::vector<int32_t> high = {0, 10, 3};
  const absl::Status st = CheckTokenIds("prompt", high, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "prompt: token id 10 at index 1 is outside the vocabulary of 10");
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(CheckTokenIds("prompt", negative, 10).ok());
  EXPECT_EQ(CheckTokenIds("prompt", {}, 10).message(), "prompt: must not be empty");
  EXPECT_TRUE(CheckTokenIds("stop_token_ids", {}, 10, /*allow_empty=*/true).ok());
}

TEST(TokenRules, OneIdIncludingOnesBeyondInt32) {
  EXPECT_TRUE(CheckTokenId("tokens", 9, 10).ok());
  EXPECT_EQ(CheckTokenId("tokens", int64_t{1} << 40, 10).message(),
            "tokens: token id 1099511627776 is outside the vocabulary of 10");
  EXPECT_FALSE(CheckTokenId("tokens", -1, 10).ok());
}

TEST(TokenRules, RoomCountsThePromptAndTheTokensToGenerate) {
  EXPECT_TRUE(CheckRoom(100, 28, 128).ok());
  const absl::Status st = CheckRoom(100, 29, 128);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "max_tokens: prompt (100 tokens) + max_tokens (29) exceeds the context of 128 tokens");
  EXPECT_EQ(CheckRoom(10, 10, 16, "the KV cache").message(),
            "max_tokens: prompt (10 tokens) + max_tokens (10) exceeds the KV cache of 16 tokens");
}

}  // namespace
}  // namespace tandem::model
