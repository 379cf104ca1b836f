#include "common/tokenizer/chat_template.h"

#include <fstream>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::tokenizer {
namespace {

using ::testing::HasSubstr;

struct GoldenCounts {
  size_t families = 0, cases = 0;
  int with_tools = 0, errors = 0, own_errors = 0;
};

// Renders every case of a golden (tests/reference/make_chat_golden.py): each rendering
// byte for byte, each template's own raise_exception message word for word, and a
// failure wherever jinja2 itself failed. The templates in `known` (name: why) are those
// tandem does not render as jinja2 yet: each must still differ somewhere.
void CheckGolden(const std::string& file, GoldenCounts* counts,
                 const std::map<std::string, std::string>& known = {}) {
  std::ifstream in(::tandem::testing::TestDataPath(file));
  ASSERT_TRUE(in.good());
  const auto golden = nlohmann::ordered_json::parse(in);  // key order matters to tojson
  const auto& templates = golden.at("templates");
  const auto& cases = golden.at("cases");
  std::set<std::string> families, differed;
  int errors = 0, own_errors = 0, with_tools = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(::testing::Message()
                 << "case " << i << " (" << c.at("family").get<std::string>() << ")");
    families.insert(c.at("family").get<std::string>());
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      ChatMessage& msg = messages.emplace_back();
      msg.role = m.at("role");
      msg.content = m.at("content");
      msg.tool_call_id = m.value("tool_call_id", "");
      for (const auto& call : m.value("tool_calls", nlohmann::ordered_json::array())) {
        const auto& f = call.at("function");
        // The arguments travel as JSON text, in the order the golden keeps them.
        msg.tool_calls.push_back({call.at("id"), f.at("name"), f.at("arguments").dump()});
      }
    }
    ChatTemplateOptions options;
    if (c.contains("tools")) {
      ++with_tools;
      options.tools.emplace();
      for (const auto& t : c.at("tools")) {
        const auto& f = t.at("function");
        options.tools->push_back({f.at("name"), f.at("description"), f.at("parameters").dump()});
      }
    }
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (c.contains("bos_token")) options.bos_token = c.at("bos_token").get<std::string>();
    if (c.contains("eos_token")) options.eos_token = c.at("eos_token").get<std::string>();
    auto got = ChatTemplate::Render(
        templates.at(c.at("family").get<std::string>()).get<std::string>(), messages, options);
    // What differs from jinja2, or "".
    std::string mismatch;
    if (c.contains("error")) {
      ++errors;
      if (got.ok()) {
        mismatch = "rendered where jinja2 failed (" + c.at("error").dump() + "):\n" + *got;
      } else if (c.contains("error_type")) {
        // jinja2 or Python failed on its own (None + str, an undefined attribute): tandem
        // fails too, in its own words.
        ++own_errors;
      } else if (got.status().code() != absl::StatusCode::kInvalidArgument ||
                 got.status().message() != "chat template: " + c.at("error").get<std::string>()) {
        mismatch = "failed otherwise than jinja2 (" + c.at("error").dump() +
                   "): " + std::string(got.status().message());
      }
    } else if (!got.ok()) {
      mismatch = std::string(got.status().message());
    } else if (*got != c.at("rendered").get<std::string>()) {
      mismatch =
          "rendered\n" + *got + "\nwhere jinja2 rendered\n" + c.at("rendered").get<std::string>();
    }
    if (known.contains(c.at("family").get<std::string>())) {
      if (!mismatch.empty()) differed.insert(c.at("family").get<std::string>());
    } else if (!mismatch.empty()) {
      ADD_FAILURE() << mismatch;
    }
  }
  for (const auto& [family, why] : known) {
    EXPECT_TRUE(differed.contains(family))
        << family << " now renders as jinja2 does: take it off the list (" << why << ")";
  }
  *counts = {families.size(), cases.size(), with_tools, errors, own_errors};
}

// Renderings by Python's jinja2, configured as transformers configures it, of the real
// templates: byte for byte, errors included.
TEST(ChatTemplate, MatchesJinja2OnRealTemplates) {
  GoldenCounts n;
  CheckGolden("chat_template_golden.json", &n);
  EXPECT_GE(n.families, 13u);
  EXPECT_GE(n.cases, 400u);
  EXPECT_GE(n.with_tools, 60);
  EXPECT_GT(n.errors, n.own_errors);
}

// Every template in llama.cpp's tree (models/templates: the published templates of the
// models its server supports), three conversations with and without a generation
// prompt and two tool conversations with and without tools, as jinja2 renders them with
// transformers' settings, {% generation %} included.
TEST(ChatTemplate, MatchesJinja2OnEveryTemplateInLlamaCppsTree) {
  GoldenCounts n;
  CheckGolden("chat_template_llama_cpp_golden.json", &n);
  EXPECT_GE(n.families, 70u);
  EXPECT_GE(n.with_tools, 140);
}

TEST(ChatTemplate, ThreeArgumentRenderLeavesSpecialTokensUndefined) {
  const std::string tpl =
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}>{% endif %}{{ tools is none }}{{ eos_token is defined }}";
  EXPECT_EQ(*ChatTemplate::Render(tpl, {{"user", "hi"}}, true), "[user:hi]>TrueFalse");
  EXPECT_EQ(*ChatTemplate::Render(tpl, {{"user", "hi"}}, false), "[user:hi]TrueFalse");
  ChatTemplateOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.extra_variables = {{"tools", jinja::Value::Bool(false)}};
  EXPECT_EQ(*ChatTemplate::Render(tpl, {{"user", "hi"}}, options), "<s>[user:hi]>FalseTrue");
}

TEST(ChatTemplate, ParsedOnceAppliedMany) {
  auto tpl = ChatTemplate::Create("{{ messages | length }}:{{ messages[-1].content }}");
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  ChatTemplateOptions options;
  EXPECT_EQ(*tpl->Apply({{"user", "a"}}, options), "1:a");
  EXPECT_EQ(*tpl->Apply({{"user", "a"}, {"assistant", "b"}}, options), "2:b");
}

TEST(ChatTemplate, Errors) {
  EXPECT_EQ(ChatTemplate::Render("", {{"user", "hi"}}, true).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ChatTemplate::Render("{{ x }}", {}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto malformed = ChatTemplate::Render("ok\n{% if %}", {{"user", "hi"}}, true);
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(malformed.status().message()),
              HasSubstr("chat template: line 2, column"));
  EXPECT_EQ(ChatTemplate::Render("{% include 'x' %}", {{"user", "hi"}}, true).status().code(),
            absl::StatusCode::kUnimplemented);
  auto raised = ChatTemplate::Render("{{ raise_exception('no ' ~ messages[0].role) }}",
                                     {{"robot", "hi"}}, true);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(raised.status().message()), "chat template: no robot");
  auto spin = ChatTemplate::Render(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      {{"user", "hi"}}, true);
  EXPECT_EQ(spin.status().code(), absl::StatusCode::kResourceExhausted);
}

// The output limit grows with the conversation, so long prompts still render.
TEST(ChatTemplate, LongContentsRender) {
  const std::string big(6 << 20, 'x');
  auto got = ChatTemplate::Render("{% for m in messages %}<{{ m.content }}>{% endfor %}",
                                  {{"user", big}}, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), big.size() + 2);
}

}  // namespace
}  // namespace tandem::tokenizer
