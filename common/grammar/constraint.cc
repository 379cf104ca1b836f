#include "common/grammar/constraint.h"

#include <algorithm>
#include <utility>

#include "common/util/strings.h"

namespace tandem::grammar {

Constraint::Constraint(std::shared_ptr<const Grammar> grammar,
                       std::shared_ptr<const TokenMasker> masker)
    : masker_(std::move(masker)), matcher_(std::move(grammar)) {}

const TokenMask& Constraint::Allowed() {
  ++stats_.masks;
  if (auto it = cache_.find(matcher_.state()); it != cache_.end()) {
    ++stats_.cache_hits;
    return it->second;
  }
  masker_->Fill(matcher_, matcher_.state(), &scratch_);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  return cache_.emplace(matcher_.state(), scratch_).first->second;
}

absl::Status Constraint::Accept(int32_t id) {
  if (id < 0 || id >= masker_->vocab_size()) {
    return absl::InvalidArgumentError(StrCat("token ", id, " is outside the vocabulary"));
  }
  const auto& ends = masker_->end_tokens();
  if (std::find(ends.begin(), ends.end(), id) != ends.end()) {
    if (!matcher_.CanEnd()) {
      return absl::FailedPreconditionError(StrCat("the grammar cannot end before token ", id));
    }
    return absl::OkStatus();
  }
  const std::string& bytes = masker_->token_bytes(id);
  if (bytes.empty() || !matcher_.Accept(bytes)) {
    return absl::FailedPreconditionError(
        matcher_.exhausted() ? std::string("the grammar's parse grew past its bounds")
                             : StrCat("the grammar does not allow token ", id, " here"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::grammar
