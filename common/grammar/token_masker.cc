#include "common/grammar/token_masker.h"

#include <algorithm>
#include <numeric>
#include <string_view>
#include <utility>

namespace tandem::grammar {

TokenMasker::TokenMasker(const std::vector<std::string>& token_bytes,
                         std::vector<int32_t> end_tokens)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())),
      token_bytes_(token_bytes),
      end_tokens_(std::move(end_tokens)) {
  // An end token ends the output whatever its text: it is never a piece of it.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (!token_bytes[id].empty() &&
        std::find(end_tokens_.begin(), end_tokens_.end(), id) == end_tokens_.end()) {
      order.push_back(id);
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });
  byte_ = {0};
  depth_ = {0};
  end_ = {0};
  std::vector<std::vector<int32_t>> at = {{}};  // [node] tokens ending there
  std::vector<int32_t> path = {0};              // [depth] node on the current path
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view s = token_bytes[id];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common + 1) {  // close the nodes below the shared prefix
      end_[path.back()] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[k]));
      depth_.push_back(static_cast<int32_t>(k + 1));
      end_.push_back(0);
      at.emplace_back();
    }
    at[path.back()].push_back(id);
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(s.size()));
    prev = s;
  }
  for (int32_t n : path) end_[n] = static_cast<int32_t>(byte_.size());
  token_start_.push_back(0);
  for (const auto& ids : at) {
    token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
    token_start_.push_back(static_cast<int32_t>(token_ids_.size()));
  }
}

void TokenMasker::Fill(GrammarMatcher& m, const GrammarMatcher::State& state,
                       TokenMask* mask) const {
  mask->assign((static_cast<size_t>(vocab_size_) + 63) / 64, 0);
  auto allow = [&](int32_t id) { (*mask)[id >> 6] |= uint64_t{1} << (id & 63); };
  if (state.can_end) {
    for (int32_t id : end_tokens_) allow(id);
  }
  if (state.heads.empty()) return;
  // The walk revisits few distinct states (inside a string most bytes lead back to the
  // same one), so steps go through the matcher's memo. Bounded: past the limit the
  // memo starts again.
  if (m.interned_count() > kMaxInternedStates) m.ResetInterned();
  std::vector<int32_t> level(max_depth_ + 1);  // [depth] state id after the path
  level[0] = m.InternState(state);
  const int32_t n = static_cast<int32_t>(byte_.size());
  for (int32_t i = 1; i < n;) {
    const int32_t d = depth_[i];
    const int32_t here = m.StepInterned(level[d - 1], byte_[i]);
    if (!m.interned(here).Alive()) {
      i = end_[i];
      continue;
    }
    level[d] = here;
    for (int32_t k = token_start_[i]; k < token_start_[i + 1]; ++k) allow(token_ids_[k]);
    ++i;
  }
}

}  // namespace tandem::grammar
