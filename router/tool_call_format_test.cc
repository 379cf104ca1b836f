#include "router/tool_call_format.h"

#include <fstream>

#include "common/grammar/grammar_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::router {
namespace {

using ::testing::MatchesRegex;

const std::vector<std::string> kNames = {"get_weather", "now"};

const std::vector<tokenizer::ToolDefinition> kTools = {
    {"get_weather", "Weather in a city.",
     R"({"type": "object", "properties": {"city": {"type": "string"}, )"
     R"("unit": {"enum": ["c", "f"]}}, "required": ["city"]})"},
    {"now", std::nullopt, ""},
};

struct Parsed {
  std::string content;
  std::vector<tokenizer::ToolCall> calls;
};

// The text pushed in pieces of `step` bytes (0: all at once), then finished.
Parsed Stream(ToolCallFormat format, std::string_view text, size_t step) {
  ToolCallStream stream(format, kNames);
  Parsed out;
  if (step == 0) {
    stream.Push(text, &out.content, &out.calls);
  } else {
    for (size_t i = 0; i < text.size(); i += step) {
      stream.Push(text.substr(i, step), &out.content, &out.calls);
    }
  }
  stream.Finish(&out.content, &out.calls);
  EXPECT_EQ(stream.calls_made(), static_cast<int>(out.calls.size()));
  return out;
}

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

TEST(ToolCallStream, TakesCallsOutOfTheTextHoweverItStreams) {
  using F = ToolCallFormat;
  const Case cases[] = {
      // hermes
      {F::kHermes, "Just text, no calls. a < b <tool", "Just text, no calls. a < b <tool", {}},
      {F::kHermes, "  spaced answer \n", "  spaced answer \n", {}},
      {F::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Zürich\"}}\n</tool_call>",
       "Let me check.",
       {{"get_weather", R"({"city":"Zürich"})"}}},
      {F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"c"})"}, {"now", "{}"}}},
      // Arguments as a JSON string; "parameters" for "arguments"; no closing tag at the end.
      {F::kHermes,
       "<tool_call>{\"name\": \"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}</tool_call>"
       "<tool_call>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "",
       {{"now", R"({"tz":"UTC"})"}, {"get_weather", R"({"city":"Oslo"})"}}},
      // Not calls: unknown function, broken JSON, arguments not an object. Kept as text.
      {F::kHermes,
       "A <tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call> B",
       "A <tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call> B",
       {}},
      {F::kHermes,
       "<tool_call>{\"name\": \"now\", \"arguments\": {</tool_call>",
       "<tool_call>{\"name\": \"now\", \"arguments\": {</tool_call>",
       {}},
      {F::kHermes,
       "<tool_call>{\"name\": \"now\", \"arguments\": [1]}",
       "<tool_call>{\"name\": \"now\", \"arguments\": [1]}",
       {}},
      {F::kHermes,
       "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\nDone: it is noon.",
       "Done: it is noon.",
       {{"now", "{}"}}},
      // llama3_json
      {F::kLlama3Json, "{\"name\": \"now\", \"parameters\": {}}", "", {{"now", "{}"}}},
      {F::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b}\"}}; "
       "{\"name\": \"now\", \"parameters\": {}}",
       "",
       {{"get_weather", R"({"city":"a;b}"})"}, {"now", "{}"}}},
      {F::kLlama3Json, "The set {1, 2} has two members.", "The set {1, 2} has two members.", {}},
      {F::kLlama3Json, "  {\"foo\": 1} and more", "  {\"foo\": 1} and more", {}},
      {F::kLlama3Json, "<|python", "<|python", {}},
      // mistral
      {F::kMistral,
       "Sure. [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
       "{\"name\": \"now\", \"arguments\": {}}]",
       "Sure.",
       {{"get_weather", R"({"city":"Oslo"})"}, {"now", "{}"}}},
      {F::kMistral, "[TOOL_CALLS]{\"name\": \"now\", \"arguments\": {}}", "", {{"now", "{}"}}},
      {F::kMistral, "[TOOL_CALLS] not json", "[TOOL_CALLS] not json", {}},
      {F::kMistral, "text [TOOL_CA", "text [TOOL_CA", {}},
  };
  for (const Case& c : cases) {
    for (size_t step : {0, 1, 3, 7}) {
      SCOPED_TRACE(::testing::Message()
                   << ToolCallFormatName(c.format) << " step " << step << ": " << c.text);
      const Parsed got = Stream(c.format, c.text, step);
      EXPECT_EQ(got.content, c.content);
      ASSERT_EQ(got.calls.size(), c.calls.size());
      for (size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, c.calls[i].first);
        EXPECT_EQ(got.calls[i].arguments, c.calls[i].second);
        EXPECT_THAT(got.calls[i].id, c.format == ToolCallFormat::kMistral
                                         ? MatchesRegex("[A-Za-z0-9]{9}")
                                         : MatchesRegex("call_[A-Za-z0-9]{24}"));
      }
    }
  }
}

TEST(ToolCallStream, ReleasesHermesCallsAsTheyCompleteAndHoldsOnlyAPossibleTag) {
  ToolCallStream s(ToolCallFormat::kHermes, kNames);
  std::string content;
  std::vector<tokenizer::ToolCall> calls;
  s.Push("Hello <tool", &content, &calls);
  EXPECT_EQ(content, "Hello");  // "<tool" may start a call; the space waits for what follows
  s.Push("_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", &content, &calls);
  EXPECT_EQ(calls.size(), 1u);  // complete before the output ends
  s.Push(" then <b>", &content, &calls);
  EXPECT_EQ(content, "Hellothen <b>");
}

TEST(ToolCallFormat, IsChosenFromTheTemplate) {
  std::ifstream in(::tandem::testing::TestDataPath("chat_template_golden.json"));
  ASSERT_TRUE(in.good());
  const auto templates = nlohmann::json::parse(in).at("templates");
  const std::pair<const char*, ToolCallFormat> expected[] = {
      {"qwen2.5", ToolCallFormat::kHermes},     {"hermes3-tool-use", ToolCallFormat::kHermes},
      {"qwen3-tools", ToolCallFormat::kHermes}, {"llama3.1", ToolCallFormat::kLlama3Json},
      {"mistral-v3", ToolCallFormat::kMistral}, {"chatml-smollm2", ToolCallFormat::kHermes},
  };
  for (const auto& [family, format] : expected) {
    EXPECT_EQ(ToolCallFormatForTemplate(templates.at(family).get<std::string>()), format) << family;
  }
  EXPECT_EQ(*ParseToolCallFormat("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_FALSE(ParseToolCallFormat("pythonic").ok());
}

// What the grammar accepts is what the stream parses as calls, in every format.
TEST(ToolCallGbnf, AcceptsExactlyWellFormedCallsOfTheChosenTools) {
  using F = ToolCallFormat;
  const struct {
    F format;
    std::string one, two, wrong_args;
  } formats[] = {
      {F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Oslo\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": "
       "\"f\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}\n</tool_call>"},
      {F::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"now\", "
       "\"parameters\": {\"any\": [1]}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": 3}}"},
      {F::kMistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"O\"}}]",
       "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"get_weather\", "
       "\"arguments\": {\"city\": \"O\"}}]",
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"O\", \"x\": 1}}]"},
  };
  for (const auto& f : formats) {
    SCOPED_TRACE(ToolCallFormatName(f.format));
    auto any = ToolCallGbnf(f.format, kTools, "", true);
    auto single = ToolCallGbnf(f.format, kTools, "", false);
    auto named = ToolCallGbnf(f.format, kTools, "now", true);
    ASSERT_TRUE(any.ok() && single.ok() && named.ok()) << any.status() << single.status();
    auto g_any = grammar::MustCompile(*any);
    auto g_single = grammar::MustCompile(*single);
    auto g_named = grammar::MustCompile(*named);
    ASSERT_TRUE(g_any && g_single && g_named);
    EXPECT_TRUE(grammar::Matches(g_any, f.one));
    EXPECT_TRUE(grammar::Matches(g_any, f.two));
    EXPECT_TRUE(grammar::Matches(g_single, f.one));
    EXPECT_FALSE(grammar::Matches(g_single, f.two));  // parallel_tool_calls: false
    EXPECT_FALSE(grammar::Matches(g_named, f.one));   // tool_choice names "now"
    EXPECT_FALSE(grammar::Matches(g_any, f.wrong_args));
    EXPECT_FALSE(grammar::Matches(g_any, ""));  // "required": at least one call
    EXPECT_FALSE(grammar::Matches(g_any, "I would rather not."));
    // And the parser reads what the grammar allows.
    EXPECT_EQ(Stream(f.format, f.one, 0).calls.size(), 1u);
    EXPECT_EQ(Stream(f.format, f.two, 1).calls.size(), 2u);
  }
  auto bad = ToolCallGbnf(ToolCallFormat::kHermes,
                          {{"f", std::nullopt, R"({"type": "object", "not": {}})"}}, "", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::StartsWith("tools[0].function.parameters: "));
  EXPECT_FALSE(ToolCallGbnf(ToolCallFormat::kHermes, kTools, "nope", true).ok());
}

}  // namespace
}  // namespace tandem::router
