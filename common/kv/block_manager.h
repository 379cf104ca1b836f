// BlockManager: which KV-cache blocks each sequence owns. Metadata only — block ids
// are plain int32s; the bytes live in kernels::KvStorage.
//
// Blocks are reference-counted (a block may later be shared through the prefix cache)
// and come from a free list. Each sequence has a block table: block i holds the
// sequence's tokens [i * block_size, (i + 1) * block_size). Every *full* block gets a
// hash chained on its parent's hash and its token ids (XXH3), ready for prefix caching.
//
// Prefix cache (when enabled): a full block whose hash is registered stays in the
// cache after its last sequence frees it — unreferenced but with its K/V intact, in an
// LRU list — and a new sequence whose leading full blocks hash the same reuses them
// instead of computing them (MatchPrefix → Allocate). A cached block is evicted (its
// hash forgotten, the block handed out) only when no free block is left, least
// recently used first; a referenced block is never evicted. An optional salt, mixed
// into the first block's hash, keeps tenants' prefixes apart.
//
// Check-then-commit: CanAllocate / CanAppend say whether a call would succeed;
// Allocate / Append fail with ResourceExhausted and change nothing when they would not.
//
// Not thread-safe: owned by one engine thread.
#ifndef TANDEM_COMMON_KV_BLOCK_MANAGER_H_
#define TANDEM_COMMON_KV_BLOCK_MANAGER_H_

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace tandem::kv {

using SeqId = uint64_t;

struct BlockManagerStats {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t free_blocks = 0;    // empty, never cached
  int32_t cached_blocks = 0;  // unreferenced, K/V kept for reuse, evictable
  int32_t used_blocks = 0;    // referenced by at least one sequence
  int32_t num_sequences = 0;
  int64_t prefix_query_tokens = 0;  // tokens looked up by MatchPrefix+Allocate
  int64_t prefix_hit_tokens = 0;    // of those, found in the cache
  int64_t evicted_blocks = 0;
};

// The cached blocks a new sequence can start from.
struct PrefixMatch {
  std::vector<int32_t> blocks;   // reused blocks, in sequence order
  std::vector<uint64_t> hashes;  // their chained hashes
  int32_t in_lru = 0;            // how many of them are unreferenced now
  int64_t tokens(int32_t block_size) const {
    return static_cast<int64_t>(blocks.size()) * block_size;
  }
};

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching = false);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  // Blocks that can be handed out now: free ones and evictable cached ones.
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  bool prefix_caching() const { return prefix_caching_; }

  // The longest run of leading full blocks of `tokens` in the cache, leaving at least
  // the last token uncached (its logits must be computed). Empty when caching is off.
  PrefixMatch MatchPrefix(std::span<const int32_t> tokens, uint64_t salt) const;
  int32_t BlocksFor(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }

  // A new sequence holding `num_tokens` tokens, starting from `prefix` (a MatchPrefix
  // result taken since the last change; its blocks are shared, the rest are new).
  bool CanAllocate(int64_t num_tokens, const PrefixMatch& prefix = {}) const;
  absl::Status Allocate(SeqId seq, int64_t num_tokens, const PrefixMatch& prefix = {},
                        uint64_t salt = 0);

  // Grows `seq` to hold `num_tokens` tokens in total (never shrinks).
  bool CanAppend(SeqId seq, int64_t num_tokens) const;
  absl::Status Append(SeqId seq, int64_t num_tokens);

  // Records the hashes of the blocks of `seq` that `tokens` (the sequence's tokens
  // so far) fills completely and that have no hash yet; with caching on, registers
  // them for reuse (unless an equal block is registered already).
  void HashFullBlocks(SeqId seq, std::span<const int32_t> tokens);

  // Releases every block of `seq`: registered full blocks stay cached (LRU), the
  // others become free. Unknown sequences are ignored.
  void Free(SeqId seq);

  // A new sequence `child` holding the first `num_tokens` tokens of `parent` (parallel
  // sampling, beams): the full blocks are shared; a partial last block cannot be (both
  // will write into it), so the child gets a fresh one whose content the caller copies
  // from the parent's (*copy_from → *copy_to; -1 when there is nothing to copy).
  bool CanFork(SeqId parent, int64_t num_tokens) const;
  absl::Status Fork(SeqId parent, SeqId child, int64_t num_tokens, int32_t* copy_from,
                    int32_t* copy_to);

  // Forgets every cached block (they become free). Referenced blocks are untouched.
  void ClearCache();

  bool Has(SeqId seq) const { return tables_.contains(seq); }
  // The block table of a known sequence.
  const std::vector<int32_t>& BlockTable(SeqId seq) const;
  // Chained hash of full block i of `seq` (0 if not hashed yet).
  uint64_t BlockHash(SeqId seq, size_t i) const;

  BlockManagerStats Stats() const;

  // Checks every internal invariant (tests): no block both free and referenced, ref
  // counts equal table references, the LRU holds exactly the unreferenced registered
  // blocks, the hash index and the blocks agree.
  bool CheckInvariants() const;

 private:
  struct Table {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;  // one per full, hashed block
    uint64_t salt = 0;
  };
  uint64_t ChainHash(uint64_t parent, const int32_t* block_tokens) const;
  int32_t TakeFree();
  void Unlru(int32_t block);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_count_;                 // [num_blocks]
  std::vector<int32_t> free_;                      // stack of free block ids
  std::vector<uint64_t> block_hash_;               // [num_blocks] registered hash, 0 = none
  absl::flat_hash_map<uint64_t, int32_t> cached_;  // hash → registered block
  std::list<int32_t> lru_;                         // unreferenced registered blocks, oldest first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [num_blocks], valid when in lru_
  std::vector<bool> in_lru_;                           // [num_blocks]
  absl::flat_hash_map<SeqId, Table> tables_;
  int64_t prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0, evicted_ = 0;
};

}  // namespace tandem::kv

#endif  // TANDEM_COMMON_KV_BLOCK_MANAGER_H_
