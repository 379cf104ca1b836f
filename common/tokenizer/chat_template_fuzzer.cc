// libFuzzer target: the chat-template renderer (its Jinja lexer, parser and sandboxed
// interpreter) on arbitrary input.
//
// The first byte picks the mode. Template: the rest is a template's source, rendered
// over a fixed conversation. Conversation: the rest, split at NUL bytes, is the
// messages' contents (roles alternating user/assistant after an optional system
// message), rendered by one of the published templates in
// tests/data/chat_template_golden.json. Either way the render succeeds or fails with
// one of the documented codes (chat_template.h), within its limits; anything else —
// a crash, a sanitizer report, another code, output past the limit, a hang caught by
// -timeout — is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using tandem::tokenizer::ChatMessage;
using tandem::tokenizer::ChatTemplate;
using tandem::tokenizer::ChatTemplateOptions;

std::vector<std::string> GoldenTemplates() {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/data/chat_template_golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<std::string> out;
  for (const auto& [name, tpl] : golden.at("templates").items()) {
    out.push_back(tpl.get<std::string>());
  }
  if (out.empty()) std::abort();
  return out;
}

void Check(const absl::StatusOr<std::string>& out, size_t limit) {
  if (out.ok()) {
    if (out->size() > limit) {
      std::fprintf(stderr, "chat_template_fuzzer: %zu bytes rendered past the limit %zu\n",
                   out->size(), limit);
      std::abort();
    }
    return;
  }
  switch (out.status().code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
      return;
    default:
      std::fprintf(stderr, "chat_template_fuzzer: undocumented error %s\n",
                   out.status().ToString().c_str());
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> templates = GoldenTemplates();
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  ChatTemplateOptions options;
  options.add_generation_prompt = (data[0] & 1) != 0;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  const tandem::tokenizer::jinja::Limits limits;
  if ((data[0] & 2) == 0) {
    const std::vector<ChatMessage> messages = {
        {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    auto tpl = ChatTemplate::Create(rest, limits);
    if (!tpl.ok()) return Check(tpl.status(), 0), 0;
    Check(tpl->Apply(messages, options), 4 * limits.max_output_bytes);
    return 0;
  }
  std::vector<ChatMessage> messages;
  const bool system = (data[0] & 4) != 0;
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i < rest.size() && rest[i] != '\0') continue;
    const char* role = (system && messages.empty())
                           ? "system"
                           : ((messages.size() - (system ? 1 : 0)) % 2 == 0 ? "user" : "assistant");
    messages.push_back({role, std::string(rest.substr(start, i - start))});
    start = i + 1;
  }
  const std::string& source = templates[(data[0] >> 3) % templates.size()];
  size_t conversation = 0;
  for (const auto& m : messages) conversation += m.content.size();
  Check(ChatTemplate::Render(source, messages, options),
        std::max(limits.max_output_bytes, 4 * conversation));
  return 0;
}
