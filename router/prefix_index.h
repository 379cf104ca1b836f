// PrefixIndex: the router's approximate view of one prefill worker's prefix cache —
// the chained block hashes (common/kv/block_hash.h) of prompts it has prefilled,
// bounded LRU like the worker's own cache, plus the hashes of prompts it is computing
// right now (in flight). Built from the router's own routing history; the worker may
// have evicted what the index still lists, which costs a miss, never a wrong answer.
//
// Not thread-safe: the WorkerPool guards it.
#ifndef TANDEM_ROUTER_PREFIX_INDEX_H_
#define TANDEM_ROUTER_PREFIX_INDEX_H_

#include <cstdint>
#include <list>
#include <span>

#include "absl/container/flat_hash_map.h"

namespace tandem::router {

class PrefixIndex {
 public:
  void set_capacity(size_t blocks) { capacity_ = blocks; }

  // How many leading hashes are believed cached.
  int32_t CachedPrefix(std::span<const uint64_t> hashes) const;
  // How many leading hashes are cached or being computed now.
  int32_t FuturePrefix(std::span<const uint64_t> hashes) const;

  void AddInFlight(std::span<const uint64_t> hashes);
  // The computation ended; on success its blocks are now cached.
  void EndInFlight(std::span<const uint64_t> hashes, bool cached);

 private:
  void Insert(uint64_t hash);

  size_t capacity_ = 1 << 16;
  std::list<uint64_t> lru_;  // least recently used first
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> pos_;
  absl::flat_hash_map<uint64_t, int32_t> in_flight_;  // hash → prompts computing it
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_PREFIX_INDEX_H_
