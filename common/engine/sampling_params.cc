#include "common/engine/sampling_params.h"

#include <cmath>

#include "common/model/token_rules.h"
#include "common/util/field_error.h"
#include "common/util/strings.h"

namespace tandem::engine {

namespace {
absl::Status Bad(std::string_view field, std::string_view why) { return FieldError(field, why); }
}  // namespace

absl::Status SamplingParams::Validate(int32_t vocab_size, int64_t max_context) const {
  if (max_tokens < 1) return Bad("max_tokens", StrCat("must be at least 1, got ", max_tokens));
  if (max_tokens > max_context) {
    return Bad("max_tokens", StrCat(max_tokens, " exceeds the model's context of ", max_context));
  }
  // A grammar ends the output where it completes; ignore_eos would sample past it.
  if (ignore_eos && !grammar.empty()) {
    return Bad("ignore_eos",
               "cannot be combined with a grammar (response_format, structured output or a "
               "required tool call), which ends the output itself");
  }
  if (!std::isfinite(temperature) || temperature < 0) {
    return Bad("temperature", "must be a finite number ≥ 0");
  }
  if (top_k < -1) return Bad("top_k", "must be -1, 0 (off) or positive");
  if (top_k > vocab_size) return Bad("top_k", StrCat("exceeds the vocabulary of ", vocab_size));
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1) return Bad("top_p", "must be in (0, 1]");
  if (!std::isfinite(min_p) || min_p < 0 || min_p > 1) return Bad("min_p", "must be in [0, 1]");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0 || repetition_penalty > 10) {
    return Bad("repetition_penalty", "must be in (0, 10]");
  }
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2) {
    return Bad("presence_penalty", "must be in [-2, 2]");
  }
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2) {
    return Bad("frequency_penalty", "must be in [-2, 2]");
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return Bad("logprobs", StrCat("must be between 0 and ", kMaxLogprobs));
  }
  if (grammar.size() > kMaxGrammarBytes) {
    return Bad("grammar", StrCat("is ", grammar.size(), " bytes (at most ", kMaxGrammarBytes, ")"));
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return Bad("logit_bias", StrCat("at most ", kMaxLogitBias, " token ids"));
  }
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto& [id, bias] = logit_bias[i];
    if (id < 0 || id >= vocab_size) {
      return Bad("logit_bias",
                 StrCat("token id ", id, " is outside the vocabulary of ", vocab_size));
    }
    if (i > 0 && logit_bias[i - 1].first >= id) {
      return Bad("logit_bias", "token ids must be sorted and unique");
    }
    if (!std::isfinite(bias) || std::fabs(bias) > 100) {
      return Bad("logit_bias", StrCat("the bias of token ", id, " must be in [-100, 100]"));
    }
  }
  if (stop_token_ids.size() > kMaxStopTokenIds) {
    return Bad("stop_token_ids", StrCat("at most ", kMaxStopTokenIds, " ids"));
  }
  return model::CheckTokenIds("stop_token_ids", stop_token_ids, vocab_size, /*allow_empty=*/true);
}

}  // namespace tandem::engine
