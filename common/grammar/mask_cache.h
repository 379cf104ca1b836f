// MaskCache: the token masks of one grammar, shared by every sequence that runs it.
//
// A mask depends only on where the output stands in the grammar: the matcher's
// stacks, read as element positions (GrammarMatcher::StateKey). Keyed that way, a
// state one sequence has walked costs every other sequence of the same grammar a
// lookup, not a walk of the vocabulary — sixteen requests with one JSON Schema meet the
// same states. Bounded (cleared when full); thread-safe.
#ifndef TANDEM_COMMON_GRAMMAR_MASK_CACHE_H_
#define TANDEM_COMMON_GRAMMAR_MASK_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/grammar/token_masker.h"

namespace tandem::grammar {

class MaskCache {
 public:
  static constexpr size_t kMaxMasks = 512;  // 6 KB each for a 49k vocabulary

  // The mask stored for `key`, or null.
  std::shared_ptr<const TokenMask> Find(const std::vector<int32_t>& key) const;
  void Insert(std::vector<int32_t> key, std::shared_ptr<const TokenMask> mask);

  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::vector<int32_t>, std::shared_ptr<const TokenMask>> masks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_MASK_CACHE_H_
