// Constraint: one sequence's grammar constraint — where its output stands in the
// grammar, and the token masks it has needed.
//
// Allowed() is the mask for the next token; Accept() moves past a sampled token. A
// mask is cached per matcher state (bounded), so the states a long string or a
// repeated structure comes back to cost one walk of the vocabulary, not one per token;
// given a MaskCache, masks are also shared with every other sequence of the grammar.
// Not thread-safe: one per sequence, used by the thread that samples it. The grammar,
// the masker and the shared cache are shared (the cache is thread-safe).
#ifndef TANDEM_COMMON_GRAMMAR_CONSTRAINT_H_
#define TANDEM_COMMON_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/mask_cache.h"
#include "common/grammar/token_masker.h"

namespace tandem::grammar {

class Constraint {
 public:
  static constexpr size_t kMaxCachedMasks = 64;

  // `shared`: the grammar's masks across sequences (null: this sequence's only).
  Constraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenMasker> masker,
             std::shared_ptr<MaskCache> shared = nullptr);

  // The tokens allowed next: those whose bytes the grammar takes, and the end tokens
  // where the grammar can end. Valid until the next call.
  const TokenMask& Allowed();
  // Moves past token `id`. FailedPrecondition if the grammar refuses it (the state is
  // then unchanged) or the matcher is exhausted.
  absl::Status Accept(int32_t id);

  // The output so far is a whole sentence of the grammar.
  bool CanEnd() const { return matcher_.CanEnd(); }
  // Nothing but an end token can follow.
  bool MustEnd() const { return !matcher_.CanContinue(); }

  struct Stats {
    int64_t masks = 0;        // Allowed() calls
    int64_t cache_hits = 0;   // answered from this sequence's state cache
    int64_t shared_hits = 0;  // ... from the grammar's shared cache
  };
  const Stats& stats() const { return stats_; }

 private:
  std::shared_ptr<const TokenMasker> masker_;
  std::shared_ptr<MaskCache> shared_;
  GrammarMatcher matcher_;
  absl::flat_hash_map<GrammarMatcher::State, std::shared_ptr<const TokenMask>> cache_;
  std::vector<int32_t> key_;  // scratch for StateKey
  Stats stats_;
};

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_CONSTRAINT_H_
