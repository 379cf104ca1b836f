// RequestValidator: a client's GenerateRequest → a RequestSpec the router can run, or
// InvalidArgument naming the offending field (DESIGN.md §9). Tokenizes (applying the
// chat template for chat requests) and counts tokens. The only router file besides
// the service that reads a client proto.
//
// Thread-safe (const after construction).
#ifndef TANDEM_ROUTER_REQUEST_VALIDATOR_H_
#define TANDEM_ROUTER_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/sampling_params.h"
#include "common/model/model_config.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "router/request_spec.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::router {

struct ValidatorLimits {
  int64_t max_prompt_bytes = 1 << 20;  // text, or all chat contents together
  int32_t max_stop_strings = 16;
  int32_t max_stop_bytes = 256;
};

class RequestValidator {
 public:
  RequestValidator(const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
                   ValidatorLimits limits = {});

  // `kv_capacity_tokens`: the most tokens any decode worker can hold (0: unknown).
  // `fill_context`: without max_tokens, generate up to the end of the context (or of
  // the KV capacity) rather than vLLM's default of 16 (OpenAI chat semantics).
  absl::StatusOr<RequestSpec> Validate(const v1::GenerateRequest& req, int64_t kv_capacity_tokens,
                                       bool fill_context = false) const;
  // The prompt of a Tokenize request (text or chat), with the same checks.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const v1::TokenizeRequest& req) const;

 private:
  absl::StatusOr<std::vector<int32_t>> EncodeText(std::string_view field,
                                                  const std::string& text) const;
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const v1::Chat& chat) const;

  const tokenizer::Tokenizer& tokenizer_;
  const model::ModelConfig& config_;
  const ValidatorLimits limits_;
  // The model's chat template, parsed once (an error here fails only chat requests).
  const absl::StatusOr<tokenizer::ChatTemplate> chat_template_;
  tokenizer::ChatTemplateOptions chat_options_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_REQUEST_VALIDATOR_H_
