#include "router/request_validator.h"

#include "common/engine/model_file.h"
#include "common/util/field_error.h"
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
  EXPECT_EQ(spec->params.priority, 0);
  EXPECT_FALSE(spec->params.disable_speculation);
  r.mutable_sampling_params()->set_seed(0);
  r.mutable_sampling_params()->set_priority(-7);
  r.mutable_sampling_params()->set_disable_speculation(true);
  auto again = v.Validate(r, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again->params.seed, 0u);
  EXPECT_EQ(again->params.priority, -7);
  EXPECT_TRUE(again->params.disable_speculation);
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

v1::GenerateRequest ToolRequest(v1::ToolChoice::Mode mode, const std::string& function = "") {
  v1::GenerateRequest r;
  v1::Chat* chat = r.mutable_chat();
  auto* m = chat->add_messages();
  m->set_role("user");
  m->set_content("Weather in Oslo?");
  auto* a = chat->add_messages();
  a->set_role("assistant");
  auto* call = a->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Oslo"})");
  auto* t = chat->add_messages();
  t->set_role("tool");
  t->set_tool_call_id("call_1");
  t->set_content("-3 C");
  v1::Tool* tool = chat->add_tools();
  tool->set_name("get_weather");
  tool->set_description("Weather in a city.");
  tool->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
  chat->mutable_tool_choice()->set_mode(mode);
  chat->mutable_tool_choice()->set_function(function);
  return r;
}

TEST_F(RequestValidatorTest, ToolsReachATemplateThatCannotShowThem) {
  // SmolLM2's template never mentions tools: tandem says what they are in the system
  // prompt and writes earlier calls into their turn, in the hermes format.
  RequestValidator v(*model_->tokenizer, model_->config);
  EXPECT_EQ(v.tool_format(), ToolCallFormat::kHermes);
  auto spec = v.Validate(ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO), 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string text = *model_->tokenizer->Decode(spec->prompt);
  EXPECT_THAT(text, ::testing::StartsWith("<|im_start|>system\nYou may call functions"));
  EXPECT_THAT(text, ::testing::HasSubstr(R"({"type":"function","function":{"name":"get_weather",)"
                                         R"("description":"Weather in a city.","parameters":)"));
  EXPECT_THAT(text, ::testing::HasSubstr("<|im_start|>assistant\n<tool_call>\n{\"name\": "
                                         "\"get_weather\", \"arguments\": {\"city\": "
                                         "\"Oslo\"}}\n</tool_call><|im_end|>"));
  EXPECT_THAT(text, ::testing::HasSubstr("<|im_start|>tool\n-3 C<|im_end|>"));
  EXPECT_TRUE(spec->parse_tool_calls);
  EXPECT_EQ(spec->tool_names, std::vector<std::string>{"get_weather"});
  EXPECT_TRUE(spec->params.grammar.empty());  // auto: the model decides

  auto required = v.Validate(ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED), 0);
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_THAT(required->params.grammar, ::testing::HasSubstr("<tool_call>"));
  auto named = v.Validate(ToolRequest(v1::ToolChoice::TOOL_CHOICE_FUNCTION, "get_weather"), 0);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_FALSE(named->params.grammar.empty());
  auto none = v.Validate(ToolRequest(v1::ToolChoice::TOOL_CHOICE_NONE), 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->parse_tool_calls);
  EXPECT_TRUE(none->params.grammar.empty());

  // The parser can be named instead.
  RequestValidator mistral(*model_->tokenizer, model_->config, {}, ToolCallFormat::kMistral);
  auto m = mistral.Validate(ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED), 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tool_format, ToolCallFormat::kMistral);
  EXPECT_THAT(m->params.grammar, ::testing::HasSubstr("[TOOL_CALLS]"));
}

// A chat template that renders nothing for these messages: 400 naming the messages,
// not a worker's refusal after the request was accepted.
TEST_F(RequestValidatorTest, AChatTemplateThatRendersNothingIsRefusedNamingTheMessages) {
  model::ModelConfig config = model_->config;
  config.chat_template = "{% for m in messages %}{% endfor %}";
  RequestValidator v(*model_->tokenizer, config);
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hello");
  auto spec = v.Validate(r, 0);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "chat.messages: the chat template rendered an empty prompt");
  EXPECT_EQ(ErrorField(spec.status()), "chat.messages");
}

TEST_F(RequestValidatorTest, BadToolsNameTheField) {
  RequestValidator v(*model_->tokenizer, model_->config);
  auto error = [&](const v1::GenerateRequest& r) {
    auto spec = v.Validate(r, 0);
    return spec.ok() ? std::string("ok") : std::string(spec.status().message());
  };
  EXPECT_THAT(error(ToolRequest(v1::ToolChoice::TOOL_CHOICE_FUNCTION, "nope")),
              StartsWith("tool_choice: no tool is named 'nope'"));
  v1::GenerateRequest r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO);
  r.mutable_chat()->add_tools()->set_name("get_weather");
  EXPECT_THAT(error(r), StartsWith("chat.tools[1].name: is given twice"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO);
  r.mutable_chat()->mutable_tools(0)->set_name("rm -rf");
  EXPECT_THAT(error(r), StartsWith("chat.tools[0].name:"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  r.mutable_chat()->mutable_tools(0)->set_parameters(R"({"type": "object", "not": {}})");
  EXPECT_THAT(error(r), StartsWith("tools[0].function.parameters: json schema"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO);
  r.mutable_chat()->mutable_tools(0)->set_parameters("[1]");
  EXPECT_THAT(error(r), StartsWith("chat.tools[0].parameters: must be a JSON Schema object"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO);
  r.mutable_chat()->mutable_messages(1)->mutable_tool_calls(0)->set_arguments("{");
  EXPECT_THAT(error(r),
              StartsWith("chat.messages[1].tool_calls[0].arguments: must be a JSON object"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  r.mutable_sampling_params()->set_regex("a+");
  EXPECT_THAT(error(r), StartsWith("structured_output: cannot be combined"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  r.mutable_chat()->clear_tools();
  EXPECT_THAT(error(r), StartsWith("chat.tool_choice: needs tools"));
  // ignore_eos with any grammar: refused here, as the workers would (one rule,
  // SamplingParams::Validate), before a token is sent; the field is named.
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
  r.mutable_sampling_params()->set_ignore_eos(true);
  EXPECT_THAT(error(r), StartsWith("ignore_eos: cannot be combined with a grammar"));
  r = ToolRequest(v1::ToolChoice::TOOL_CHOICE_AUTO);
  r.mutable_sampling_params()->set_ignore_eos(true);
  r.mutable_sampling_params()->set_regex("a+");
  auto spec = v.Validate(r, 0);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(ErrorField(spec.status()), "ignore_eos");
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
