// TokenMasker: which tokens of a vocabulary a grammar allows next.
//
// The vocabulary's token bytes sit in a byte trie laid out in preorder; Fill walks it
// once against a matcher's state, stepping the state one byte per trie edge and
// skipping a whole subtree as soon as no stack takes its first byte. A token is
// allowed when every byte of it is taken; an end token (EOS, end of turn) exactly when
// the grammar can end there; a token with no bytes (other control tokens) never.
//
// Immutable after construction and shared by every sequence of a model; Fill mutates
// only the matcher it is given.
#ifndef TANDEM_COMMON_GRAMMAR_TOKEN_MASKER_H_
#define TANDEM_COMMON_GRAMMAR_TOKEN_MASKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/grammar/grammar_matcher.h"

namespace tandem::grammar {

// One bit per token id, 1 = allowed.
using TokenMask = std::vector<uint64_t>;

inline bool Allowed(const TokenMask& mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }

class TokenMasker {
 public:
  // `token_bytes[id]`: the bytes token `id` adds to the output; `end_tokens`: ids that
  // end the output.
  TokenMasker(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_tokens);

  int32_t vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }

  // `mask` (resized to the vocabulary) = the tokens allowed after `state` of `m`.
  void Fill(GrammarMatcher& m, const GrammarMatcher::State& state, TokenMask* mask) const;

 private:
  static constexpr size_t kMaxInternedStates = 1 << 16;

  int32_t vocab_size_;
  std::vector<std::string> token_bytes_;  // [id]
  std::vector<int32_t> end_tokens_;
  // The trie in preorder; node 0 is the root (the empty string).
  std::vector<uint8_t> byte_;         // [node] the byte on the edge into it
  std::vector<int32_t> depth_;        // [node]
  std::vector<int32_t> end_;          // [node] one past the last node of its subtree
  std::vector<int32_t> token_start_;  // [node + 1] its tokens: token_ids_[start[n], start[n+1])
  std::vector<int32_t> token_ids_;
  int32_t max_depth_ = 0;
};

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_TOKEN_MASKER_H_
