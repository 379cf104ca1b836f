// ChatTemplate: renders a conversation into the prompt text a chat model expects.
//
// GGUF files carry a Jinja template (`tokenizer.chat_template`). Until tandem has its
// own sandboxed Jinja renderer, this recognises the template families by their
// markers and renders them natively:
//   - ChatML (`<|im_start|>role\n...<|im_end|>\n`, SmolLM, Qwen), including a default
//     system message the template inserts when the conversation has none;
//   - Llama 3 (`<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`).
// Anything else is Unimplemented, naming the problem. Output is checked against
// Python's jinja2 rendering of the real templates (tests/reference/make_chat_golden.py).
// Pure functions; thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
#define TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  static absl::StatusOr<std::string> Render(std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt);
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_CHAT_TEMPLATE_H_
