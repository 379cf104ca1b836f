#include "common/tokenizer/chat_template.h"

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

namespace {

// The default system message a ChatML template writes as a literal
// '<|im_start|>system\n...<|im_end|>\n' (empty if it has none).
std::string DefaultChatMlSystem(std::string_view tpl) {
  constexpr std::string_view kOpen = "<|im_start|>system\n";
  size_t start = tpl.find(kOpen);
  if (start == std::string_view::npos) return "";
  // Only a literal inside a quoted string counts (not `'<|im_start|>' + role`).
  if (start == 0 || (tpl[start - 1] != '\'' && tpl[start - 1] != '"')) return "";
  start += kOpen.size();
  const size_t end = tpl.find("<|im_end|>", start);
  if (end == std::string_view::npos) return "";
  return std::string(tpl.substr(start, end - start));
}

// Jinja's `trim`: Python's str.strip() on ASCII whitespace.
std::string_view Trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

absl::StatusOr<std::string> ChatTemplate::Render(std::string_view tpl,
                                                 const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) {
  if (messages.empty()) return absl::InvalidArgumentError("messages: must not be empty");
  for (const auto& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(StrCat("messages: unknown role '", m.role, "'"));
    }
  }
  std::string out;
  if (tpl.find("<|im_start|>") != std::string_view::npos) {
    const std::string system = DefaultChatMlSystem(tpl);
    if (!system.empty() && messages.front().role != "system") {
      out += StrCat("<|im_start|>system\n", system, "<|im_end|>\n");
    }
    for (const auto& m : messages)
      out += StrCat("<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  if (tpl.find("<|start_header_id|>") != std::string_view::npos) {
    out += "<|begin_of_text|>";
    for (const auto& m : messages) {
      out += StrCat("<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Trim(m.content),
                    "<|eot_id|>");
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (tpl.empty())
    return absl::UnimplementedError("the model has no chat template; use a raw prompt");
  return absl::UnimplementedError(
      "this model's chat template is not one tandem can render yet (ChatML, Llama 3); use a raw "
      "prompt");
}

}  // namespace tandem::tokenizer
