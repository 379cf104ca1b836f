// ToolCallFormat: how a model family writes its tool calls, and the two things the
// router does with that: a grammar that makes the model call (tool_choice "required"
// or a named function) and ToolCallStream, which takes the calls out of the text.
//
// The formats, by vLLM's parser names:
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per
//                call, text before them is content (Hermes 2 Pro / 3, Qwen2.5, Qwen3; also
//                what tandem tells models whose template has no tool support)
//   llama3_json  {"name": "f", "parameters": {...}}, optionally after <|python_tag|>,
//                several separated by ";": the whole answer is the calls (Llama 3.1–3.3)
//   mistral      [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...] after any content
//                (Mistral 7B v0.3, Nemo, Large 2407)
// ToolCallFormatForTemplate picks one from the chat template's text; `tandem router
// --tool-call-parser` overrides it.
//
// A call counts only when its JSON parses, names one of the request's tools and has an
// object as its arguments ("arguments" or "parameters"; an object's JSON text is
// accepted too); anything else stays content, so a model that merely talks about
// <tool_call> loses nothing. Pure / one stream per choice; not thread-safe.
#ifndef TANDEM_ROUTER_TOOL_CALL_FORMAT_H_
#define TANDEM_ROUTER_TOOL_CALL_FORMAT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/chat_template.h"

namespace tandem::router {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

// "hermes", "llama3_json" or "mistral"; InvalidArgument naming the choices otherwise.
absl::StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name);
std::string_view ToolCallFormatName(ToolCallFormat format);
// [TOOL_CALLS] in the template: mistral; <|python_tag|> or Llama 3.1's "ipython" role:
// llama3_json; otherwise hermes.
ToolCallFormat ToolCallFormatForTemplate(std::string_view chat_template);

// What tandem adds to the system prompt when the template does not render `tools`
// (hermes format: the tools' JSON inside <tools></tools> and how to call them).
std::string ToolsSystemPrompt(const std::vector<tokenizer::ToolDefinition>& tools);
// An assistant turn's calls as the hermes text, for templates that do not render
// tool_calls themselves.
std::string HermesCallsText(const std::vector<tokenizer::ToolCall>& calls);

// GBNF accepting only tool calls in `format`: at least one, exactly one unless
// `parallel`, each of the function named `only` (empty: any of `tools`) with arguments
// valid under its parameters schema (JsonSchemaToGbnf's subset; none: any object).
// InvalidArgument naming "tools[i].function.parameters" for a schema it cannot compile.
absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format,
                                         const std::vector<tokenizer::ToolDefinition>& tools,
                                         std::string_view only, bool parallel);

// Generated text → content and tool calls, as the text streams. Text that might still
// become a call is held back; a call is released once complete (hermes: at its closing
// tag; the others: at Finish). Whitespace next to a call is not content. Each call gets a
// fresh id ("call_" + 24 alphanumerics; mistral: 9, as its template requires).
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::vector<std::string> tool_names);

  // Appends what can be shown now to `content` and completed calls to `calls`.
  void Push(std::string_view text, std::string* content, std::vector<tokenizer::ToolCall>* calls);
  // The text ended: releases everything.
  void Finish(std::string* content, std::vector<tokenizer::ToolCall>* calls);

  int calls_made() const { return calls_made_; }

 private:
  enum class State { kStart, kText, kCall };
  void PushHermes(std::string* content, std::vector<tokenizer::ToolCall>* calls);
  // Parses `text` as this format's calls (all of it); false leaves `calls` unchanged.
  bool ParseCalls(std::string_view text, std::vector<tokenizer::ToolCall>* calls);
  // One call's JSON, if it is a call of one of the tools.
  std::optional<tokenizer::ToolCall> ReadCall(std::string_view json_text) const;
  void Emit(std::string_view text, std::string* content);
  std::string NewId() const;

  const ToolCallFormat format_;
  const std::vector<std::string> names_;
  State state_ = State::kStart;
  std::string pending_;      // held back
  std::string whitespace_;   // trailing whitespace of the content, held until text follows
  bool after_call_ = false;  // drop the whitespace that follows a call
  int calls_made_ = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_TOOL_CALL_FORMAT_H_
