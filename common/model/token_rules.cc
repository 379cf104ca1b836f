#include "common/model/token_rules.h"

#include "common/util/field_error.h"
#include "common/util/strings.h"

namespace tandem::model {

absl::Status CheckTokenId(std::string_view field, int64_t id, int64_t vocab_size) {
  if (id >= 0 && id < vocab_size) return absl::OkStatus();
  return FieldError(field, StrCat("token id ", id, " is outside the vocabulary of ", vocab_size));
}

absl::Status CheckTokenIds(std::string_view field, std::span<const int32_t> ids, int64_t vocab_size,
                           bool allow_empty) {
  if (ids.empty() && !allow_empty) {
    return FieldError(field, "must not be empty");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return FieldError(field, StrCat("token id ", ids[i], " at index ", i,
                                      " is outside the vocabulary of ", vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRoom(int64_t prompt_tokens, int64_t max_tokens, int64_t limit,
                       std::string_view what) {
  if (prompt_tokens + max_tokens <= limit) return absl::OkStatus();
  return FieldError("max_tokens", StrCat("prompt (", prompt_tokens, " tokens) + max_tokens (",
                                         max_tokens, ") exceeds ", what, " of ", limit, " tokens"));
}

}  // namespace tandem::model
