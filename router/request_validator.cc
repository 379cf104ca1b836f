#include "router/request_validator.h"

#include <xxhash.h>

#include <algorithm>
#include <random>

#include "common/grammar/grammar.h"
#include "common/model/token_rules.h"
#include "common/util/bounded_json.h"
#include "common/util/field_error.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"
#include "nlohmann/json.hpp"
#include "router/structured_output.h"

namespace tandem::router {

namespace {

absl::Status Bad(std::string_view field, std::string_view why) { return FieldError(field, why); }

uint64_t RandomSeed() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

}  // namespace

RequestValidator::RequestValidator(const tokenizer::Tokenizer& tokenizer,
                                   const model::ModelConfig& config, ValidatorLimits limits,
                                   std::optional<ToolCallFormat> tool_format)
    : tokenizer_(tokenizer),
      config_(config),
      limits_(limits),
      chat_template_(tokenizer::ChatTemplate::Create(config.chat_template)),
      tool_format_(tool_format.value_or(ToolCallFormatForTemplate(config.chat_template))),
      template_renders_tools_(config.chat_template.find("tools") != std::string::npos),
      template_renders_tool_calls_(config.chat_template.find("tool_calls") != std::string::npos) {
  // BOS comes from Encode (as the vocab asks); EOS text for templates that close turns with it.
  if (config.eos_token_id >= 0 && config.eos_token_id < tokenizer.vocab_size()) {
    chat_options_.eos_token = tokenizer.TokenBytes(config.eos_token_id);
  }
}

absl::StatusOr<std::vector<int32_t>> RequestValidator::EncodeText(std::string_view field,
                                                                  const std::string& text) const {
  if (text.empty()) return Bad(field, "the prompt must not be empty");
  if (static_cast<int64_t>(text.size()) > limits_.max_prompt_bytes) {
    return Bad(field,
               StrCat(text.size(), " bytes exceeds the limit of ", limits_.max_prompt_bytes));
  }
  if (const size_t bad = utf8::FirstInvalid(text); bad < text.size()) {
    return Bad(field, StrCat("invalid UTF-8 at byte ", bad));
  }
  auto ids = tokenizer_.Encode(text);
  if (!ids.ok()) return Bad(field, StrCat(ids.status().message()));
  return ids;
}

namespace {

// JSON text of an object (nesting bounded as the chat template bounds it).
bool IsJsonObject(std::string_view text) {
  absl::StatusOr<nlohmann::ordered_json> j = ParseBoundedJson(text);
  return j.ok() && j->is_object();
}

bool ValidToolName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> RequestValidator::EncodeChat(const v1::Chat& chat,
                                                                  RequestSpec* spec) const {
  if (chat.messages().empty()) return Bad("chat.messages", "at least one message is required");
  std::vector<tokenizer::ChatMessage> messages;
  int64_t bytes = 0;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    const std::string field = StrCat("chat.messages[", i, "]");
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant" &&
        m.role() != "tool") {
      return Bad(StrCat(field, ".role"), "must be system, user, assistant or tool");
    }
    if (const size_t bad = utf8::FirstInvalid(m.content()); bad < m.content().size()) {
      return Bad(StrCat(field, ".content"), StrCat("invalid UTF-8 at byte ", bad));
    }
    if (m.tool_calls_size() > 0 && m.role() != "assistant") {
      return Bad(StrCat(field, ".tool_calls"), "only an assistant turn makes tool calls");
    }
    tokenizer::ChatMessage& msg = messages.emplace_back();
    msg.role = m.role();
    msg.content = m.content();
    msg.tool_call_id = m.tool_call_id();
    msg.name = m.name();
    bytes += static_cast<int64_t>(m.content().size() + m.tool_call_id().size() + m.name().size());
    for (int k = 0; k < m.tool_calls_size(); ++k) {
      const v1::ToolCall& c = m.tool_calls(k);
      const std::string cf = StrCat(field, ".tool_calls[", k, "]");
      if (!ValidToolName(c.name())) {
        return Bad(StrCat(cf, ".function.name"), "must be 1 to 64 of A-Z a-z 0-9 _ -");
      }
      if (!utf8::IsValid(c.id()) || !utf8::IsValid(c.arguments())) {
        return Bad(cf, "invalid UTF-8");
      }
      if (!IsJsonObject(c.arguments())) {
        return Bad(StrCat(cf, ".arguments"), "must be a JSON object's text");
      }
      msg.tool_calls.push_back({c.id(), c.name(), c.arguments()});
      bytes += static_cast<int64_t>(c.id().size() + c.name().size() + c.arguments().size());
    }
    if (!utf8::IsValid(msg.tool_call_id) || !utf8::IsValid(msg.name)) {
      return Bad(field, "invalid UTF-8");
    }
  }

  // Tools.
  tokenizer::ChatTemplateOptions options = chat_options_;
  std::vector<tokenizer::ToolDefinition> tools;
  if (chat.tools_size() > kMaxTools) {
    return Bad("chat.tools", StrCat(chat.tools_size(), " tools; at most ", kMaxTools));
  }
  for (int i = 0; i < chat.tools_size(); ++i) {
    const v1::Tool& t = chat.tools(i);
    const std::string field = StrCat("chat.tools[", i, "]");
    if (!ValidToolName(t.name())) {
      return Bad(StrCat(field, ".name"), "must be 1 to 64 of A-Z a-z 0-9 _ -");
    }
    for (const tokenizer::ToolDefinition& seen : tools) {
      if (seen.name == t.name()) return Bad(StrCat(field, ".name"), "is given twice");
    }
    if (!utf8::IsValid(t.description()) || !utf8::IsValid(t.parameters())) {
      return Bad(field, "invalid UTF-8");
    }
    if (!t.parameters().empty() && !IsJsonObject(t.parameters())) {
      return Bad(StrCat(field, ".parameters"), "must be a JSON Schema object's text");
    }
    tokenizer::ToolDefinition& def = tools.emplace_back();
    def.name = t.name();
    if (t.has_description()) def.description = t.description();
    def.parameters = t.parameters();
    bytes += static_cast<int64_t>(t.name().size() + t.description().size() + t.parameters().size());
  }
  if (bytes > limits_.max_prompt_bytes) {
    return Bad("chat.messages",
               StrCat(bytes, " bytes exceeds the limit of ", limits_.max_prompt_bytes));
  }
  const v1::ToolChoice& choice = chat.tool_choice();
  if (tools.empty() &&
      (choice.mode() == v1::ToolChoice::TOOL_CHOICE_REQUIRED ||
       choice.mode() == v1::ToolChoice::TOOL_CHOICE_FUNCTION || chat.has_parallel_tool_calls())) {
    return Bad("chat.tool_choice", "needs tools");  // "none" and "auto" mean nothing then
  }
  if (choice.mode() != v1::ToolChoice::TOOL_CHOICE_FUNCTION && !choice.function().empty()) {
    return Bad("chat.tool_choice.function", "is only for mode TOOL_CHOICE_FUNCTION");
  }
  if (!tools.empty()) {
    if (!template_renders_tools_) {
      // The template cannot show the tools: say what they are and how to call them.
      const std::string prompt = ToolsSystemPrompt(tools);
      if (messages.front().role == "system") {
        messages.front().content = StrCat(messages.front().content, "\n\n", prompt);
      } else {
        messages.insert(messages.begin(), tokenizer::ChatMessage{"system", prompt, {}, "", ""});
      }
    } else {
      options.tools = tools;
    }
  }
  if (!template_renders_tool_calls_) {
    for (tokenizer::ChatMessage& m : messages) {
      if (m.tool_calls.empty()) continue;
      const std::string calls = HermesCallsText(m.tool_calls);
      m.content = m.content.empty() ? calls : StrCat(m.content, "\n", calls);
      m.tool_calls.clear();
    }
  }
  if (spec != nullptr && !tools.empty() && choice.mode() != v1::ToolChoice::TOOL_CHOICE_NONE) {
    spec->parse_tool_calls = true;
    spec->tool_format = tool_format_;
    for (const tokenizer::ToolDefinition& t : tools) spec->tool_names.push_back(t.name);
    if (choice.mode() == v1::ToolChoice::TOOL_CHOICE_REQUIRED ||
        choice.mode() == v1::ToolChoice::TOOL_CHOICE_FUNCTION) {
      const bool parallel = !chat.has_parallel_tool_calls() || chat.parallel_tool_calls();
      auto gbnf = ToolCallGbnf(tool_format_, tools, choice.function(), parallel);
      if (!gbnf.ok()) return gbnf.status();  // names the tool's field
      if (auto g = grammar::Grammar::Compile(*gbnf); !g.ok())
        return Bad("tools", std::string(g.status().message()));
      spec->params.grammar = *std::move(gbnf);
    }
  }

  if (!chat_template_.ok()) return Bad("chat", StrCat(chat_template_.status().message()));
  auto text = chat_template_->Apply(messages, options);
  if (!text.ok()) return Bad("chat", StrCat(text.status().message()));
  // Tokenized exactly as `tandem generate --chat` does.
  auto ids = tokenizer_.Encode(*text);
  if (!ids.ok()) return Bad("chat", StrCat(ids.status().message()));
  // Refused here, not by a worker after the request was accepted.
  if (ids->empty()) return Bad("chat.messages", "the chat template rendered an empty prompt");
  return ids;
}

absl::StatusOr<RequestSpec> RequestValidator::Validate(const v1::GenerateRequest& req,
                                                       int64_t kv_capacity_tokens,
                                                       bool fill_context) const {
  RequestSpec spec;
  spec.request_id = req.request_id();
  if (spec.request_id.size() > 256) return Bad("request_id", "at most 256 bytes");
  spec.stream = req.stream();
  if (req.cache_salt().size() > 256) return Bad("cache_salt", "at most 256 bytes");
  if (!req.cache_salt().empty()) {
    spec.cache_salt = XXH3_64bits(req.cache_salt().data(), req.cache_salt().size()) | 1;
  }
  switch (req.input_case()) {
    case v1::GenerateRequest::kText: {
      ASSIGN_OR_RETURN(spec.prompt, EncodeText("text", req.text()));
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = req.token_ids().ids();
      RETURN_IF_ERROR(model::CheckTokenIds(
          "token_ids", {ids.data(), static_cast<size_t>(ids.size())}, config_.vocab_size));
      spec.prompt.assign(ids.begin(), ids.end());
      break;
    }
    case v1::GenerateRequest::kChat: {
      ASSIGN_OR_RETURN(spec.prompt, EncodeChat(req.chat(), &spec));
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return Bad("input", "one of text, token_ids or chat is required");
  }

  const v1::SamplingParams& s = req.sampling_params();
  engine::SamplingParams& p = spec.params;
  if (s.has_max_tokens()) {
    p.max_tokens = s.max_tokens();
  } else if (fill_context) {
    int64_t limit = config_.context_length;
    if (kv_capacity_tokens > 0) limit = std::min(limit, kv_capacity_tokens);
    const int64_t room = limit - static_cast<int64_t>(spec.prompt.size());
    if (room < 1) {
      return Bad("max_tokens", StrCat("the prompt (", spec.prompt.size(),
                                      " tokens) leaves no room in the context of ", limit));
    }
    p.max_tokens = static_cast<int32_t>(room);
  }
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  p.seed = s.has_seed() ? s.seed() : RandomSeed();
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  if (s.has_logprobs()) {
    if (s.logprobs() < 0) return Bad("logprobs", "must be between 0 and 20");
    p.logprobs = s.logprobs();
  }
  p.ignore_eos = s.ignore_eos();
  p.disable_speculation = s.disable_speculation();
  p.priority = s.priority();
  p.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  std::sort(p.logit_bias.begin(), p.logit_bias.end());
  ASSIGN_OR_RETURN(std::string constraint, StructuredOutputGbnf(s));
  if (!constraint.empty()) {
    if (!p.grammar.empty()) {
      return Bad("structured_output", "cannot be combined with tool_choice required or a function");
    }
    p.grammar = std::move(constraint);
  }
  RETURN_IF_ERROR(p.Validate(static_cast<int32_t>(config_.vocab_size), config_.context_length));

  if (s.stop_size() > limits_.max_stop_strings) {
    return Bad("stop", StrCat(s.stop_size(), " stop strings; at most ", limits_.max_stop_strings));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string& stop = s.stop(i);
    if (stop.empty()) return Bad("stop", StrCat("stop string ", i, " is empty"));
    if (static_cast<int32_t>(stop.size()) > limits_.max_stop_bytes) {
      return Bad("stop",
                 StrCat("stop string ", i, " is longer than ", limits_.max_stop_bytes, " bytes"));
    }
    if (!utf8::IsValid(stop)) {
      return Bad("stop", StrCat("stop string ", i, " is not valid UTF-8"));
    }
    spec.stop.push_back(stop);
  }

  const int64_t n = static_cast<int64_t>(spec.prompt.size());
  RETURN_IF_ERROR(model::CheckRoom(n, p.max_tokens, config_.context_length));
  if (kv_capacity_tokens > 0) {
    RETURN_IF_ERROR(model::CheckRoom(n, p.max_tokens, kv_capacity_tokens,
                                     "the KV cache of every decode worker"));
  }
  return spec;
}

absl::StatusOr<std::vector<int32_t>> RequestValidator::Tokenize(
    const v1::TokenizeRequest& req) const {
  switch (req.input_case()) {
    case v1::TokenizeRequest::kText:
      return EncodeText("text", req.text());
    case v1::TokenizeRequest::kChat:
      return EncodeChat(req.chat(), nullptr);
    case v1::TokenizeRequest::INPUT_NOT_SET:
      break;
  }
  return Bad("input", "one of text or chat is required");
}

}  // namespace tandem::router
