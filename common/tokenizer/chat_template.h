// ChatTemplate: renders a conversation into the prompt text a chat model expects.
//
// GGUF files carry the model's Jinja template (`tokenizer.chat_template`, copied from
// Hugging Face's tokenizer_config.json). tandem renders it with its own sandboxed Jinja
// interpreter (jinja/template.h), byte for byte as transformers' apply_chat_template
// does with Python's jinja2; tests/reference/make_chat_golden.py records that rendering
// for SmolLM2, Qwen2/2.5, a Qwen3-style tool template, Llama 3/3.1, Mistral v0.2/v1/v3,
// Gemma 2/3, Phi-3.5, Hermes 3 tool_use and Command-R tool-use templates, with and
// without tools, and chat_template_test.cc checks it.
//
// The template sees `messages` (a list of {"role", "content"}, plus "tool_calls",
// "tool_call_id" and "name" where a message has them), `add_generation_prompt`, `tools`
// (None, or OpenAI's [{"type": "function", "function": {"name", "description",
// "parameters"}}]), `documents` (None), `bos_token` / `eos_token` when given, and any
// extra variables. Nothing else: no files, no clock. A tool call is given as
// {"id", "type": "function", "function": {"name", "arguments"}} with the arguments as the
// object their JSON text holds (as vLLM passes them; templates print them with tojson),
// and a message's content as "" when the client sent none (vLLM again).
//
// Errors (all prefixed "chat template: "): Unimplemented for an empty template or a
// Jinja feature outside the supported subset; InvalidArgument for no messages, tool-call
// arguments or tool parameters that are not a JSON object, a
// malformed template (with line and column) or one that rejects the conversation
// (its raise_exception message, e.g. "Conversation roles must alternate ...");
// ResourceExhausted when the template exceeds its limits (jinja/budget.h).
// Immutable after Create(); Apply() and Render() are thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
#define TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/jinja/template.h"

namespace tandem::tokenizer {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", or what else the template accepts
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // an assistant turn's calls (absent when empty)
  std::string tool_call_id = {};          // a tool turn: the call it answers (absent when empty)
  std::string name = {};                  // absent when empty
};

// A function the model may call (OpenAI's tools[i].function).
struct ToolDefinition {
  std::string name;
  std::optional<std::string> description;
  std::string parameters;  // a JSON Schema object's text; empty: absent
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // Unset: undefined in the template (renders as ""). The tokenizer adds BOS itself
  // (Tokenizer::Encode), so callers that keep that leave bos_token unset.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Unset: `tools` is None.
  std::optional<std::vector<ToolDefinition>> tools;
  // More variables, e.g. {"date_string", "26 Jul 2024"} for Llama 3.1; these win over
  // the ones above.
  jinja::ValueDict extra_variables;
};

class ChatTemplate {
 public:
  // Parses once. Apply() renders within `limits`, except that the output limit rises to
  // four times the conversation's bytes when that is more, so it never cuts a long prompt.
  static absl::StatusOr<ChatTemplate> Create(std::string_view template_source,
                                             const jinja::Limits& limits = {});
  absl::StatusOr<std::string> Apply(const std::vector<ChatMessage>& messages,
                                    const ChatTemplateOptions& options) const;

  // Parse and apply in one call.
  static absl::StatusOr<std::string> Render(std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            const ChatTemplateOptions& options);
  static absl::StatusOr<std::string> Render(std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt);

 private:
  ChatTemplate(jinja::Template tpl, const jinja::Limits& limits)
      : template_(std::move(tpl)), limits_(limits) {}
  jinja::Template template_;
  jinja::Limits limits_;
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
