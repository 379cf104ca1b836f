// The rules every request's tokens obey, each worded once (docs/api.md, "Statuses"): the router's
// validator, the OpenAI front, the detokenizer and the engine (which checks again what
// a worker is sent) all call these, so a bad id or an overlong request reads the same
// wherever it is caught. Errors are InvalidArgument, "<field>: why".
#ifndef TANDEM_COMMON_MODEL_TOKEN_RULES_H_
#define TANDEM_COMMON_MODEL_TOKEN_RULES_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"

namespace tandem::model {

// `id` in [0, vocab_size).
absl::Status CheckTokenId(std::string_view field, int64_t id, int64_t vocab_size);
// Every id in [0, vocab_size) (the first bad one named with its index), and at least
// one unless `allow_empty`.
absl::Status CheckTokenIds(std::string_view field, std::span<const int32_t> ids, int64_t vocab_size,
                           bool allow_empty = false);
// The prompt plus the tokens to generate fit in `limit` tokens of `what` (the
// model's context, a KV cache); the error names max_tokens.
absl::Status CheckRoom(int64_t prompt_tokens, int64_t max_tokens, int64_t limit,
                       std::string_view what = "the context");

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_TOKEN_RULES_H_
