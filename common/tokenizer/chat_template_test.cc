#include "common/tokenizer/chat_template.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::tokenizer {
namespace {

// Renderings by Python's jinja2 of the real templates (tests/reference/make_chat_golden.py).
TEST(ChatTemplate, MatchesJinja2OnRealTemplates) {
  std::ifstream in(::tandem::testing::TestDataPath("chat_template_golden.json"));
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    auto got = ChatTemplate::Render(c.at("template").get<std::string>(), messages,
                                    c.at("add_generation_prompt").get<bool>());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.at("rendered").get<std::string>()) << c.at("family");
  }
}

TEST(ChatTemplate, RejectsWhatItCannotRender) {
  EXPECT_EQ(ChatTemplate::Render("{{ messages }}", {{"user", "hi"}}, true).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ChatTemplate::Render("", {{"user", "hi"}}, true).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_THAT(
      std::string(ChatTemplate::Render("<|im_start|>", {{"robot", "hi"}}, true).status().message()),
      ::testing::HasSubstr("role"));
  EXPECT_EQ(ChatTemplate::Render("<|im_start|>", {}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::tokenizer
