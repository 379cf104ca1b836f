#include "router/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::router {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

OpenAiRequest Parse(OpenAiEndpoint e, std::string_view body) {
  auto r = ParseOpenAiRequest(e, body);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : OpenAiRequest{};
}

std::string Error(OpenAiEndpoint e, std::string_view body) {
  auto r = ParseOpenAiRequest(e, body);
  EXPECT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

constexpr auto kChat = OpenAiEndpoint::kChatCompletions;
constexpr auto kText = OpenAiEndpoint::kCompletions;

TEST(OpenAiRequest, ChatMessagesBecomeOneChatRequest) {
  OpenAiRequest r = Parse(kChat, R"({
    "model": "m", "stream": true, "stream_options": {"include_usage": true},
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "again"}],
    "max_completion_tokens": 7, "temperature": 0, "top_k": 5, "min_p": 0.1,
    "repetition_penalty": 1.1, "ignore_eos": true, "stop": "x", "seed": 3,
    "priority": -3, "disable_speculation": true,
    "logprobs": true, "top_logprobs": 2, "user": "ignored", "unknown_field": 1})");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_EQ(r.logprobs, 2);
  ASSERT_EQ(r.choices.size(), 1u);
  const v1::GenerateRequest& g = r.choices[0];
  ASSERT_EQ(g.chat().messages_size(), 4);
  EXPECT_EQ(g.chat().messages(0).role(), "system");
  EXPECT_EQ(g.chat().messages(1).content(), "Hi there");
  EXPECT_EQ(g.chat().messages(2).content(), "");
  const v1::SamplingParams& s = g.sampling_params();
  EXPECT_EQ(s.max_tokens(), 7);
  EXPECT_EQ(s.temperature(), 0);
  EXPECT_EQ(s.top_k(), 5);
  EXPECT_FLOAT_EQ(s.min_p(), 0.1f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(s.priority(), -3);
  EXPECT_TRUE(s.disable_speculation());
  ASSERT_EQ(s.stop_size(), 1);
  EXPECT_EQ(s.stop(0), "x");
  EXPECT_EQ(s.seed(), 3u);
  EXPECT_EQ(s.logprobs(), 2);
}

TEST(OpenAiRequest, ToolsAndToolTurnsReachTheChat) {
  OpenAiRequest r = Parse(kChat, R"({
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
               "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}},
              {"type": "function", "function": {"name": "now"}}],
    "tool_choice": {"type": "function", "function": {"name": "now"}},
    "parallel_tool_calls": false})");
  const v1::Chat& chat = r.choices.at(0).chat();
  ASSERT_EQ(chat.messages_size(), 3);
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(1).tool_calls(0).name(), "get_weather");
  EXPECT_EQ(chat.messages(1).tool_calls(0).arguments(), R"({"city": "Oslo"})");
  EXPECT_EQ(chat.messages(2).role(), "tool");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");
  ASSERT_EQ(chat.tools_size(), 2);
  EXPECT_EQ(chat.tools(0).description(), "d");
  // Properties keep the order they were sent in.
  EXPECT_EQ(chat.tools(0).parameters(), R"({"type":"object","properties":{"z":{},"a":{}}})");
  EXPECT_FALSE(chat.tools(1).has_description());
  EXPECT_EQ(chat.tools(1).parameters(), "");
  EXPECT_EQ(chat.tool_choice().mode(), v1::ToolChoice::TOOL_CHOICE_FUNCTION);
  EXPECT_EQ(chat.tool_choice().function(), "now");
  ASSERT_TRUE(chat.has_parallel_tool_calls());
  EXPECT_FALSE(chat.parallel_tool_calls());

  // "none" and "auto" without tools are accepted (and mean nothing).
  const v1::Chat plain =
      Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})")
          .choices.at(0)
          .chat();
  EXPECT_EQ(plain.tools_size(), 0);
  EXPECT_EQ(plain.tool_choice().mode(), v1::ToolChoice::TOOL_CHOICE_AUTO);
}

TEST(OpenAiRequest, LogitBiasEchoAndBestOf) {
  OpenAiRequest r = Parse(kText, R"({"prompt": ["a", [5, 6]], "n": 2, "best_of": 3, "seed": 4,
                                     "echo": true, "logit_bias": {"7": -100, "3": 2.5}})");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.echo_texts, (std::vector<std::string>{"a", ""}));
  ASSERT_EQ(r.choices.size(), 6u);  // prompts × best_of candidates
  EXPECT_EQ(r.choices[4].token_ids().ids_size(), 2);
  EXPECT_EQ(r.choices[5].sampling_params().seed(), 6u);  // candidate i: seed + i
  // The workers report each token's log-probability, to rank the candidates.
  EXPECT_EQ(r.choices[0].sampling_params().logprobs(), 0);
  EXPECT_EQ(r.logprobs, -1);
  const auto& bias = r.choices[0].sampling_params().logit_bias();
  ASSERT_EQ(bias.size(), 2u);
  EXPECT_FLOAT_EQ(bias.at(7), -100.0f);
  EXPECT_FLOAT_EQ(bias.at(3), 2.5f);
  for (const char* body :
       {R"({"prompt": "a", "logit_bias": {"-1": 1}})",
        R"({"prompt": "a", "logit_bias": {"1": 101}})",
        R"({"prompt": "a", "logit_bias": {"1": "x"}})", R"({"prompt": "a", "logit_bias": [1]})"}) {
    EXPECT_THAT(Error(kText, body), StartsWith("logit_bias:")) << body;
  }
  EXPECT_THAT(Error(kText, R"({"prompt": "a", "best_of": 1, "n": 2})"), StartsWith("best_of:"));
  EXPECT_THAT(Error(kText, R"({"prompt": "a", "best_of": 2, "stream": true})"),
              StartsWith("best_of:"));
  EXPECT_THAT(Error(kText, R"({"prompt": ["a", "b"], "best_of": 9})"), StartsWith("prompt:"));
  EXPECT_THAT(Error(kText, R"({"prompt": "a", "echo": true, "logprobs": 0})"), StartsWith("echo:"));
  EXPECT_THAT(Error(kChat, R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"),
              StartsWith("echo:"));
}

TEST(OpenAiRequest, PromptFormsAndChoicesFanOut) {
  OpenAiRequest text = Parse(kText, R"({"prompt": "Hello", "max_tokens": 4})");
  ASSERT_EQ(text.choices.size(), 1u);
  EXPECT_EQ(text.choices[0].text(), "Hello");
  EXPECT_FALSE(text.stream);
  EXPECT_EQ(text.logprobs, -1);
  EXPECT_FALSE(text.choices[0].sampling_params().has_logprobs());

  OpenAiRequest ids = Parse(kText, R"({"prompt": [1, 2, 3], "logprobs": 0})");
  ASSERT_EQ(ids.choices.size(), 1u);
  EXPECT_THAT(ids.choices[0].token_ids().ids(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(ids.logprobs, 0);

  // Two prompts × n = 3: prompt p's choice i at p * 3 + i, seeds s, s+1, s+2 per prompt.
  OpenAiRequest many =
      Parse(kText, R"({"prompt": ["a", [5, 6]], "n": 3, "seed": 10, "stop": ["u", "v"],
                      "request_id": "r"})");
  ASSERT_EQ(many.choices.size(), 6u);
  EXPECT_EQ(many.n, 3);
  EXPECT_EQ(many.choices[2].text(), "a");
  EXPECT_EQ(many.choices[3].token_ids().ids_size(), 2);
  EXPECT_EQ(many.choices[0].sampling_params().seed(), 10u);
  EXPECT_EQ(many.choices[2].sampling_params().seed(), 12u);
  EXPECT_EQ(many.choices[4].sampling_params().seed(), 11u);
  EXPECT_EQ(many.choices[0].request_id(), "r");
  EXPECT_EQ(many.choices[5].request_id(), "r-5");
  EXPECT_EQ(many.choices[1].sampling_params().stop_size(), 2);
}

TEST(OpenAiRequest, BadFieldsNameTheParameter) {
  EXPECT_THAT(Error(kText, "{not json"), StartsWith("body:"));
  EXPECT_THAT(Error(kText, "[1]"), StartsWith("body:"));
  EXPECT_THAT(Error(kText, R"({"max_tokens": 3})"), StartsWith("prompt:"));
  // An empty text prompt parses; RequestValidator refuses it like any empty prompt.
  EXPECT_EQ(Parse(kText, R"({"prompt": ""})").choices.size(), 1u);
}

TEST(OpenAiRequest, BadValuesAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "a", "temperature": "hot"})", "temperature:"},
      {R"({"prompt": "a", "temperature": 3})", "temperature:"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens:"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens:"},
      {R"({"prompt": "a", "n": 0})", "n:"},
      {R"({"prompt": "a", "n": 17})", "n:"},
      {R"({"prompt": ["a", "b"], "n": 9})", "prompt:"},
      {R"({"prompt": "a", "best_of": 17})", "best_of:"},
      {R"({"prompt": "a", "echo": 1})", "echo:"},
      {R"({"prompt": "a", "suffix": "z"})", "suffix:"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs:"},
      {R"({"prompt": "a", "logit_bias": {"1": -200}})", "logit_bias:"},
      {R"({"prompt": "a", "stop": [1]})", "stop:"},
      {R"({"prompt": "a", "stop_token_ids": ["x"]})", "stop_token_ids:"},
      {R"({"prompt": "a", "stream": "yes"})", "stream:"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options:"},
      {R"({"prompt": [1, "a"]})", "prompt:"},
      {R"({"prompt": [-1]})", "prompt:"},
      {R"({"prompt": {}})", "prompt:"},
      {R"({"prompt": "a", "seed": "1"})", "seed:"},
      {R"({"prompt": "a", "top_k": -2})", "top_k:"},
      {R"({"prompt": "a", "model": 5})", "model:"},
      {R"({"prompt": "a", "priority": "high"})", "priority:"},
      {R"({"prompt": "a", "priority": 1.5})", "priority:"},
      {R"({"prompt": "a", "priority": 3000000000})", "priority:"},
      {R"({"prompt": "a", "disable_speculation": "yes"})", "disable_speculation:"},
  };
  for (const auto& [body, param] : cases) {
    EXPECT_THAT(Error(kText, body), StartsWith(param)) << body;
  }
  const std::pair<const char*, const char*> chat_cases[] = {
      {R"({})", "messages:"},
      {R"({"messages": []})", "messages:"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role:"},
      {R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role:"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id:"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       "messages[0].tool_calls:"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]})",
       "messages[0].tool_calls[0].function:"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", )"
       R"("arguments": 3}}]}]})",
       "messages[0].tool_calls[0].function.arguments:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code"}]})",
       "tools[0].type:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {)"
       R"("name": "f", "parameters": []}}]})",
       "tools[0].function.parameters:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": )"
       R"("f"}}], "tool_choice": "sometimes"})",
       "tool_choice:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": )"
       R"("f"}}], "tool_choice": {"type": "function"}})",
       "tool_choice:"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content:"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content:"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0].function:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       "response_format:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})",
       "response_format:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": 5})", "guided_regex:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": ["a", 1]})",
       "guided_choice:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"xml": "a"}})",
       "structured_outputs.xml:"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "a", "guided_grammar": "root ::= \"a\""})",
       "response_format:"},
  };
  for (const auto& [body, param] : chat_cases) {
    EXPECT_THAT(Error(kChat, body), StartsWith(param)) << body;
  }
}

// Integers past int64 are refused and echoed as sent, never wrapped negative; a seed
// takes the whole 64-bit range; min_tokens (not implemented) is refused, not ignored.
TEST(OpenAiRequest, HugeIntegersAreEchoedAsSentAndMinTokensIsRefused) {
  EXPECT_EQ(Error(kText, R"({"prompt": "a", "max_tokens": 18446744073709551615})"),
            "max_tokens: must be at most 9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(Error(kText, R"({"prompt": "a", "max_tokens": 9223372036854775808})"),
            "max_tokens: must be at most 9223372036854775807, got 9223372036854775808");
  EXPECT_EQ(Error(kText, R"({"prompt": "a", "max_tokens": 9223372036854775807})"),
            "max_tokens: must be between 1 and 2147483647, got 9223372036854775807");
  EXPECT_EQ(Error(kText, R"({"prompt": [18446744073709551615]})"),
            "prompt: token id 18446744073709551615 is out of range");
  EXPECT_EQ(Error(kText, R"({"prompt": "a", "stop_token_ids": [9223372036854775808]})"),
            "stop_token_ids: id 9223372036854775808 is out of range");
  EXPECT_EQ(Error(kText, R"({"prompt": "a", "min_tokens": 5})"),
            "min_tokens: is not supported by tandem (0 or absent only)");
  EXPECT_EQ(Parse(kText, R"({"prompt": "a", "min_tokens": 0})").choices.size(), 1u);
  const OpenAiRequest seeded = Parse(kText, R"({"prompt": "a", "seed": 18446744073709551615})");
  ASSERT_EQ(seeded.choices.size(), 1u);
  EXPECT_EQ(seeded.choices[0].sampling_params().seed(), 18446744073709551615ull);
  const OpenAiRequest negative = Parse(kText, R"({"prompt": "a", "seed": -1})");
  EXPECT_EQ(negative.choices[0].sampling_params().seed(), 18446744073709551615ull);
}

// Every way to ask for structured output lands in the one oneof of SamplingParams;
// a JSON Schema keeps its properties in the order the request gives them.
TEST(OpenAiRequest, StructuredOutputFields) {
  const OpenAiRequest schema = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
      "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}}})");
  ASSERT_EQ(schema.choices.size(), 1u);
  EXPECT_EQ(schema.choices[0].sampling_params().json_schema(),
            R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}})");
  EXPECT_TRUE(Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}})")
                  .choices[0]
                  .sampling_params()
                  .json_object());
  EXPECT_EQ(Parse(kText, R"({"prompt": "a", "guided_regex": "[0-9]+"})")
                .choices[0]
                .sampling_params()
                .regex(),
            "[0-9]+");
  EXPECT_EQ(Parse(kText, R"({"prompt": "a", "structured_outputs": {"grammar": "root ::= \"x\""}})")
                .choices[0]
                .sampling_params()
                .grammar(),
            "root ::= \"x\"");
  const auto choice = Parse(kText, R"({"prompt": "a", "guided_choice": ["yes", "no"]})")
                          .choices[0]
                          .sampling_params();
  ASSERT_EQ(choice.choice().choices_size(), 2);
  EXPECT_EQ(choice.choice().choices(1), "no");
  EXPECT_EQ(Parse(kText, R"({"prompt": "a", "guided_json": "{\"type\": \"integer\"}"})")
                .choices[0]
                .sampling_params()
                .json_schema(),
            R"({"type": "integer"})");
  // A schema object too deep, or in a body too wide to re-read in order, is refused.
  std::string deep = R"({"prompt": "a", "guided_json": {"enum": [)";
  deep += std::string(100, '[') + std::string(100, ']') + "]}}";
  EXPECT_THAT(Error(kText, deep), StartsWith("guided_json: nests deeper than 64"));
  std::string wide = R"({"prompt": "a", "guided_json": {"type": "integer"}, "x": {)";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 1";
  EXPECT_THAT(Error(kText, wide + "}}"), StartsWith("guided_json: the request has an object"));
  EXPECT_EQ(Parse(kText, R"({"prompt": "a", "response_format": {"type": "text"}})")
                .choices[0]
                .sampling_params()
                .structured_output_case(),
            v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET);
}

TEST(OpenAiRequest, TokenizeBodiesParseOnce) {
  auto text = ParseTokenizeRequest(R"({"prompt": "hello"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->text(), "hello");
  auto chat = ParseTokenizeRequest(
      R"({"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->chat().messages_size(), 2);
  EXPECT_EQ(chat->chat().messages(0).role(), "system");  // the chat rules, the same parser
  EXPECT_EQ(chat->chat().messages(1).content(), "hi");
  EXPECT_THAT(std::string(ParseTokenizeRequest("[1]").status().message()), StartsWith("body:"));
  EXPECT_THAT(std::string(ParseTokenizeRequest(R"({"prompt": 5})").status().message()),
              StartsWith("prompt:"));
  EXPECT_THAT(
      std::string(
          ParseTokenizeRequest(R"({"messages": [{"role": "function"}]})").status().message()),
      StartsWith("messages[0].role:"));
}

}  // namespace
}  // namespace tandem::router
