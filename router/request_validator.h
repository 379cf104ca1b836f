// RequestValidator: a client's GenerateRequest → a RequestSpec the router can run, or
// InvalidArgument naming the offending field (docs/api.md, "Statuses"). Tokenizes (applying the
// chat template for chat requests) and counts tokens. The only router file besides
// the service that reads a client proto.
//
// Tools (chat requests): names [A-Za-z0-9_-]{1,64}, unique, at most kMaxTools; the
// template gets them as `tools`. A template that never mentions `tools` is helped: the
// tools and how to call them (ToolsSystemPrompt) go into the system prompt, and earlier
// assistant calls into their turn's text, in the hermes format. tool_choice "required" or
// a function becomes a grammar (ToolCallGbnf; it cannot be combined with another
// structured-output constraint); any choice but "none" makes the response parse calls
// in the model's format (ToolCallFormatForTemplate, or the one given here).
//
// Thread-safe (const after construction).
#ifndef TANDEM_ROUTER_REQUEST_VALIDATOR_H_
#define TANDEM_ROUTER_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/sampling_params.h"
#include "common/model/model_config.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "router/request_spec.h"
#include "router/tool_call_format.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::router {

struct ValidatorLimits {
  int64_t max_prompt_bytes = 1 << 20;  // text, or all chat contents together
  int32_t max_stop_strings = 16;
  int32_t max_stop_bytes = 256;
};

inline constexpr int kMaxTools = 128;

class RequestValidator {
 public:
  // `tool_format`: how the model writes tool calls; unset, from its chat template.
  RequestValidator(const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
                   ValidatorLimits limits = {},
                   std::optional<ToolCallFormat> tool_format = std::nullopt);

  // `kv_capacity_tokens`: the most tokens any decode worker can hold (0: unknown).
  // `fill_context`: without max_tokens, generate up to the end of the context (or of
  // the KV capacity) rather than vLLM's default of 16 (OpenAI chat semantics).
  absl::StatusOr<RequestSpec> Validate(const v1::GenerateRequest& req, int64_t kv_capacity_tokens,
                                       bool fill_context = false) const;
  // The prompt of a Tokenize request (text or chat), with the same checks.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const v1::TokenizeRequest& req) const;

  absl::StatusOr<std::vector<int32_t>> EncodeText(std::string_view field,
                                                  const std::string& text) const;
  ToolCallFormat tool_format() const { return tool_format_; }

 private:
  // Also fills `spec`'s tool fields and tool grammar, when given.
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const v1::Chat& chat, RequestSpec* spec) const;

  const tokenizer::Tokenizer& tokenizer_;
  const model::ModelConfig& config_;
  const ValidatorLimits limits_;
  // The model's chat template, parsed once (an error here fails only chat requests).
  const absl::StatusOr<tokenizer::ChatTemplate> chat_template_;
  tokenizer::ChatTemplateOptions chat_options_;
  const ToolCallFormat tool_format_;
  const bool template_renders_tools_;       // the template mentions `tools`
  const bool template_renders_tool_calls_;  // ... and `tool_calls`
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_REQUEST_VALIDATOR_H_
