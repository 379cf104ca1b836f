#include "router/request_validator.h"

#include "common/engine/model_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace tandem::router {
namespace {

using ::testing::StartsWith;

class RequestValidatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new engine::ModelFile(*engine::OpenModelFile(::tandem::testing::DefaultModelPath()));
  }
  static void TearDownTestSuite() { delete model_; }
  static engine::ModelFile* model_;
};
engine::ModelFile* RequestValidatorTest::model_ = nullptr;

TEST_F(RequestValidatorTest, DefaultsFollowVllmAndSeedIsAlwaysSet) {
  RequestValidator v(*model_->tokenizer, model_->config);
  v1::GenerateRequest r;
  r.set_text("Hello world");
  auto spec = v.Validate(r, 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->prompt, *model_->tokenizer->Encode("Hello world"));
  EXPECT_EQ(spec->params.max_tokens, 16);
  EXPECT_EQ(spec->params.temperature, 1.0);
  EXPECT_EQ(spec->params.top_p, 1.0);
  EXPECT_TRUE(spec->params.seed.has_value());
  EXPECT_EQ(spec->params.logprobs, -1);
  r.mutable_sampling_params()->set_seed(0);
  EXPECT_EQ(*v.Validate(r, 0)->params.seed, 0u);
}

TEST_F(RequestValidatorTest, ChatIsRenderedWithTheModelTemplate) {
  RequestValidator v(*model_->tokenizer, model_->config);
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  auto spec = v.Validate(r, 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string text = *model_->tokenizer->Decode(spec->prompt);
  EXPECT_THAT(text, ::testing::HasSubstr("<|im_start|>user\nHi<|im_end|>"));
  EXPECT_THAT(text, ::testing::EndsWith("<|im_start|>assistant\n"));
}

TEST_F(RequestValidatorTest, KvCapacityBoundsPromptPlusMaxTokens) {
  RequestValidator v(*model_->tokenizer, model_->config);
  v1::GenerateRequest r;
  r.set_text("Hello");
  r.mutable_sampling_params()->set_max_tokens(100);
  EXPECT_TRUE(v.Validate(r, 200).ok());
  auto bad = v.Validate(r, 50);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("max_tokens: "));
}

TEST_F(RequestValidatorTest, OversizedAndMalformedTextNameTheField) {
  ValidatorLimits limits;
  limits.max_prompt_bytes = 10;
  RequestValidator v(*model_->tokenizer, model_->config, limits);
  v1::TokenizeRequest t;
  t.set_text("01234567890");
  EXPECT_THAT(std::string(v.Tokenize(t).status().message()), StartsWith("text: 11 bytes"));
  t.set_text("ok\xe2\x82");
  EXPECT_THAT(std::string(v.Tokenize(t).status().message()),
              StartsWith("text: invalid UTF-8 at byte 2"));
  v1::GenerateRequest r;
  r.set_text("hi");
  r.set_request_id(std::string(300, 'x'));
  EXPECT_THAT(std::string(v.Validate(r, 0).status().message()), StartsWith("request_id: "));
}

}  // namespace
}  // namespace tandem::router
