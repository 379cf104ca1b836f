// GrammarMatcher: where a Grammar stands after the bytes of an output so far.
//
// The state is the set of parse stacks still alive, each stopped at a byte element
// (a pushdown automaton run on all branches at once). Stacks are persistent: a node is
// (parent node, element position), interned, so equal stacks are one id, copying a
// state copies a few ints, and the states of a JSON string's body repeat exactly.
// Expansion visits each node once per step, so nullable loops end; Grammar::Compile
// has refused the left recursion that would grow a stack without reading a byte.
//
// Not thread-safe: one matcher per sequence. The grammar is shared and immutable.
// Node storage grows with the distinct stacks seen; past kMaxNodes, or a state with
// more stacks than max_heads() (a hugely ambiguous grammar), the matcher is
// exhausted(): it accepts nothing more and the caller ends the sequence with an error.
// max_heads() is the larger of kMaxHeads and the grammar's byte elements: a grammar
// whose stacks do not multiply holds each element on at most a few stacks at once, so
// an alternation of any width Grammar::Compile accepts (an enum of 60,000 values) never
// exhausts; only ambiguity that grows the stacks per byte does.
#ifndef TANDEM_COMMON_GRAMMAR_GRAMMAR_MATCHER_H_
#define TANDEM_COMMON_GRAMMAR_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/grammar/grammar.h"

namespace tandem::grammar {

class GrammarMatcher {
 public:
  // A set of stacks: `heads` sorted node ids, each at a byte element; `can_end` when
  // the bytes so far are a whole sentence of the grammar.
  struct State {
    std::vector<int32_t> heads;
    bool can_end = false;
    bool Alive() const { return can_end || !heads.empty(); }
    bool operator==(const State&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const State& s) {
      return H::combine(std::move(h), s.heads, s.can_end);
    }
  };

  static constexpr size_t kMaxNodes = 1 << 22;
  static constexpr size_t kMaxHeads = 1 << 14;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `b` if some stack takes it; otherwise returns false and changes nothing.
  bool Accept(uint8_t b);
  // All of `bytes`, or none of them.
  bool Accept(std::string_view bytes);

  bool CanEnd() const { return state_.can_end; }
  // Some byte can still follow.
  bool CanContinue() const { return !state_.heads.empty(); }
  bool exhausted() const { return exhausted_; }
  size_t max_heads() const { return max_heads_; }

  const State& state() const { return state_; }
  // `to` = `from` after byte `b` (not alive when no stack takes it). `from` is a state
  // of this matcher; the current state is left alone.
  void Step(const State& from, uint8_t b, State* to);

  // Interned states, for walks that visit the same ones over and over (a token mask
  // walks every token of the vocabulary): a state's id, and the id after a byte,
  // memoized. Ids stay valid until ResetInterned(), which only forgets the memo.
  int32_t InternState(const State& s);
  int32_t StepInterned(int32_t id, uint8_t b);
  const State& interned(int32_t id) const { return interned_states_[id]; }
  size_t interned_count() const { return interned_states_.size(); }
  void ResetInterned();

  const Grammar& grammar() const { return *grammar_; }

  // `s` by content rather than node ids: each stack as its element positions from the
  // top down (−1 after each), stacks in sorted order, then can_end. Two matchers of one
  // grammar give equal keys exactly for states that accept the same continuations.
  void StateKey(const State& s, std::vector<int32_t>* key) const;

 private:
  struct Node {
    int32_t parent;  // -1: the bottom of the stack
    int32_t pos;     // element to match next
  };
  int32_t Intern(int32_t parent, int32_t pos);
  // Adds to `to` every byte-element stack reachable from node `id` (or from the
  // bottom-of-stack end, id −1) without reading a byte.
  void Close(int32_t id, State* to);
  // Continues after the element at `pos` of a stack whose rest is `parent`.
  void After(int32_t parent, int32_t pos, State* to);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> interned_;
  std::vector<uint32_t> mark_;  // [node] the closure that last visited it
  uint32_t closure_ = 0;
  std::vector<int32_t> work_;  // Close's worklist
  State state_;
  bool exhausted_ = false;
  size_t max_heads_;
  std::vector<State> interned_states_;                  // [id]
  absl::flat_hash_map<State, int32_t> state_ids_;       // state → id
  absl::flat_hash_map<uint64_t, int32_t> transitions_;  // (id << 8 | byte) → id
};

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_GRAMMAR_MATCHER_H_
