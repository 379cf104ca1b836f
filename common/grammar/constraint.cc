#include "common/grammar/constraint.h"

#include <algorithm>
#include <utility>

#include "common/util/strings.h"

namespace tandem::grammar {

Constraint::Constraint(std::shared_ptr<const Grammar> grammar,
                       std::shared_ptr<const TokenMasker> masker, std::shared_ptr<MaskCache> shared)
    : masker_(std::move(masker)), shared_(std::move(shared)), matcher_(std::move(grammar)) {}

const TokenMask& Constraint::Allowed() {
  ++stats_.masks;
  if (auto it = cache_.find(matcher_.state()); it != cache_.end()) {
    ++stats_.cache_hits;
    return *it->second;
  }
  std::shared_ptr<const TokenMask> mask;
  if (shared_ != nullptr) {
    matcher_.StateKey(matcher_.state(), &key_);
    mask = shared_->Find(key_);
    if (mask != nullptr) ++stats_.shared_hits;
  }
  if (mask == nullptr) {
    auto fresh = std::make_shared<TokenMask>();
    masker_->Fill(matcher_, matcher_.state(), fresh.get());
    mask = std::move(fresh);
    // A walk cut short by the matcher's bounds is this sequence's problem alone.
    if (shared_ != nullptr && !matcher_.exhausted()) shared_->Insert(key_, mask);
  }
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  return *cache_.emplace(matcher_.state(), std::move(mask)).first->second;
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
