#include "common/grammar/grammar_matcher.h"

#include <algorithm>
#include <utility>

namespace tandem::grammar {

using Kind = Grammar::Kind;

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), max_heads_(std::max(kMaxHeads, grammar_->byte_elements())) {
  ++closure_;
  for (int32_t start : grammar_->alternatives(grammar_->root())) {
    if (grammar_->elements()[start].kind == Kind::kEnd) {
      state_.can_end = true;
    } else {
      Close(Intern(-1, start), &state_);
    }
  }
  std::sort(state_.heads.begin(), state_.heads.end());
  if (state_.heads.size() > max_heads_) {
    exhausted_ = true;
    state_ = {};
  }
}

int32_t GrammarMatcher::Intern(int32_t parent, int32_t pos) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(pos);
  auto [it, inserted] = interned_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({parent, pos});
    mark_.push_back(0);
    if (nodes_.size() > kMaxNodes) exhausted_ = true;
  }
  return it->second;
}

void GrammarMatcher::StateKey(const State& s, std::vector<int32_t>* key) const {
  std::vector<std::vector<int32_t>> stacks;
  stacks.reserve(s.heads.size());
  for (int32_t id : s.heads) {
    std::vector<int32_t>& stack = stacks.emplace_back();
    for (int32_t n = id; n >= 0; n = nodes_[n].parent) stack.push_back(nodes_[n].pos);
  }
  std::sort(stacks.begin(), stacks.end());
  key->clear();
  for (const auto& stack : stacks) {
    key->insert(key->end(), stack.begin(), stack.end());
    key->push_back(-1);
  }
  key->push_back(s.can_end ? 1 : 0);
}

void GrammarMatcher::Close(int32_t id, State* to) {
  const auto& el = grammar_->elements();
  work_.push_back(id);
  while (!work_.empty()) {
    const int32_t n = work_.back();
    work_.pop_back();
    if (n < 0) {
      to->can_end = true;
      continue;
    }
    if (mark_[n] == closure_) continue;
    mark_[n] = closure_;
    const Node node = nodes_[n];
    const Grammar::Element& e = el[node.pos];
    if (e.kind == Kind::kBytes) {
      to->heads.push_back(n);
    } else if (e.kind == Kind::kEnd) {
      work_.push_back(node.parent);
    } else {
      // A tail call leaves nothing to return to at this level.
      const int32_t cont =
          el[node.pos + 1].kind == Kind::kEnd ? node.parent : Intern(node.parent, node.pos + 1);
      for (int32_t start : grammar_->alternatives(e.index)) {
        work_.push_back(el[start].kind == Kind::kEnd ? cont : Intern(cont, start));
      }
    }
  }
}

void GrammarMatcher::After(int32_t parent, int32_t pos, State* to) {
  if (grammar_->elements()[pos + 1].kind == Kind::kEnd) {
    Close(parent, to);
  } else {
    Close(Intern(parent, pos + 1), to);
  }
}

void GrammarMatcher::Step(const State& from, uint8_t b, State* to) {
  to->heads.clear();
  to->can_end = false;
  if (exhausted_) return;
  if (++closure_ == 0) {  // the stamps wrapped: forget every mark
    std::fill(mark_.begin(), mark_.end(), 0);
    closure_ = 1;
  }
  const auto& el = grammar_->elements();
  for (int32_t head : from.heads) {
    const Node node = nodes_[head];
    if (grammar_->byte_set(el[node.pos].index).Has(b)) After(node.parent, node.pos, to);
  }
  std::sort(to->heads.begin(), to->heads.end());
  if (to->heads.size() > max_heads_) exhausted_ = true;
  if (exhausted_) {
    to->heads.clear();
    to->can_end = false;
  }
}

bool GrammarMatcher::Accept(uint8_t b) {
  State next;
  Step(state_, b, &next);
  if (!next.Alive()) return false;
  state_ = std::move(next);
  return true;
}

bool GrammarMatcher::Accept(std::string_view bytes) {
  State cur = state_, next;
  for (char c : bytes) {
    Step(cur, static_cast<uint8_t>(c), &next);
    if (!next.Alive()) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

int32_t GrammarMatcher::InternState(const State& s) {
  auto [it, inserted] = state_ids_.try_emplace(s, static_cast<int32_t>(interned_states_.size()));
  if (inserted) interned_states_.push_back(s);
  return it->second;
}

int32_t GrammarMatcher::StepInterned(int32_t id, uint8_t b) {
  const uint64_t key = (static_cast<uint64_t>(id) << 8) | b;
  if (auto it = transitions_.find(key); it != transitions_.end()) return it->second;
  State next;
  Step(interned_states_[id], b, &next);
  const int32_t to = InternState(next);
  transitions_.emplace(key, to);
  return to;
}

void GrammarMatcher::ResetInterned() {
  interned_states_.clear();
  state_ids_.clear();
  transitions_.clear();
}

}  // namespace tandem::grammar
