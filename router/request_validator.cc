#include "router/request_validator.h"

#include <xxhash.h>

#include <algorithm>
#include <random>

#include "common/model/token_rules.h"
#include "common/util/field_error.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"
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
                                   const model::ModelConfig& config, ValidatorLimits limits)
    : tokenizer_(tokenizer),
      config_(config),
      limits_(limits),
      chat_template_(tokenizer::ChatTemplate::Create(config.chat_template)) {
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

absl::StatusOr<std::vector<int32_t>> RequestValidator::EncodeChat(const v1::Chat& chat) const {
  if (chat.messages().empty()) return Bad("chat.messages", "at least one message is required");
  std::vector<tokenizer::ChatMessage> messages;
  int64_t bytes = 0;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    const std::string field = StrCat("chat.messages[", i, "]");
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant") {
      return Bad(StrCat(field, ".role"), "must be system, user or assistant");
    }
    if (const size_t bad = utf8::FirstInvalid(m.content()); bad < m.content().size()) {
      return Bad(StrCat(field, ".content"), StrCat("invalid UTF-8 at byte ", bad));
    }
    bytes += static_cast<int64_t>(m.content().size());
    messages.push_back({m.role(), m.content()});
  }
  if (bytes > limits_.max_prompt_bytes) {
    return Bad("chat.messages",
               StrCat(bytes, " bytes exceeds the limit of ", limits_.max_prompt_bytes));
  }
  if (!chat_template_.ok()) return Bad("chat", StrCat(chat_template_.status().message()));
  auto text = chat_template_->Apply(messages, chat_options_);
  if (!text.ok()) return Bad("chat", StrCat(text.status().message()));
  // Tokenized exactly as `tandem generate --chat` does.
  auto ids = tokenizer_.Encode(*text);
  if (!ids.ok()) return Bad("chat", StrCat(ids.status().message()));
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
      ASSIGN_OR_RETURN(spec.prompt, EncodeChat(req.chat()));
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
  ASSIGN_OR_RETURN(p.grammar, StructuredOutputGbnf(s));
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
      return EncodeChat(req.chat());
    case v1::TokenizeRequest::INPUT_NOT_SET:
      break;
  }
  return Bad("input", "one of text or chat is required");
}

}  // namespace tandem::router
