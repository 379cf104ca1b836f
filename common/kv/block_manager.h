// BlockManager: which KV-cache blocks each sequence owns. Metadata only — block ids
// are plain int32s; the bytes live in KvCache.
//
// Blocks are reference-counted (a block may later be shared through the prefix cache)
// and come from a free list. Each sequence has a block table: block i holds the
// sequence's tokens [i * block_size, (i + 1) * block_size). Every *full* block gets a
// hash chained on its parent's hash and its token ids (XXH3), ready for prefix caching.
//
// Check-then-commit: CanAllocate / CanAppend say whether a call would succeed;
// Allocate / Append fail with ResourceExhausted and change nothing when they would not.
//
// Not thread-safe: owned by one engine thread.
#ifndef TANDEM_COMMON_KV_BLOCK_MANAGER_H_
#define TANDEM_COMMON_KV_BLOCK_MANAGER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace tandem::kv {

using SeqId = uint64_t;

struct BlockManagerStats {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t free_blocks = 0;
  int32_t used_blocks = 0;  // referenced by at least one sequence
  int32_t num_sequences = 0;
};

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t BlocksFor(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }

  // A new sequence holding `num_tokens` tokens.
  bool CanAllocate(int64_t num_tokens) const;
  absl::Status Allocate(SeqId seq, int64_t num_tokens);

  // Grows `seq` to hold `num_tokens` tokens in total (never shrinks).
  bool CanAppend(SeqId seq, int64_t num_tokens) const;
  absl::Status Append(SeqId seq, int64_t num_tokens);

  // Records the hashes of the blocks of `seq` that `tokens` (the sequence's tokens
  // so far) fills completely and that have no hash yet.
  void HashFullBlocks(SeqId seq, std::span<const int32_t> tokens);

  // Returns every block of `seq` to the pool. Unknown sequences are ignored.
  void Free(SeqId seq);

  bool Has(SeqId seq) const { return tables_.contains(seq); }
  // The block table of a known sequence.
  const std::vector<int32_t>& BlockTable(SeqId seq) const;
  // Chained hash of full block i of `seq` (0 if not hashed yet).
  uint64_t BlockHash(SeqId seq, size_t i) const;

  BlockManagerStats Stats() const;

 private:
  struct Table {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;  // one per full, hashed block
  };
  int32_t TakeFree();

  int32_t block_size_;
  std::vector<int32_t> ref_count_;  // [num_blocks]
  std::vector<int32_t> free_;       // stack of free block ids
  absl::flat_hash_map<SeqId, Table> tables_;
};

}  // namespace tandem::kv

#endif  // TANDEM_COMMON_KV_BLOCK_MANAGER_H_
