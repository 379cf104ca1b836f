// The chained hash that names a full KV block by its content: the hash of the block's
// token ids seeded with its parent block's hash (the cache salt for the first block),
// so equal hashes mean equal prefixes. Shared by the block manager and the router's
// cache-aware routing, which must agree bit for bit.
#ifndef TANDEM_COMMON_KV_BLOCK_HASH_H_
#define TANDEM_COMMON_KV_BLOCK_HASH_H_

#include <xxhash.h>

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::kv {

// Never 0 (0 means "no hash" to the block manager).
inline uint64_t ChainBlockHash(uint64_t parent, const int32_t* block_tokens, int32_t block_size) {
  const uint64_t h = XXH3_64bits_withSeed(block_tokens, block_size * sizeof(int32_t), parent);
  return h == 0 ? 1 : h;
}

// The hashes of the full blocks of `tokens` that a prefix cache could hold: at most
// (tokens - 1) / block_size of them (the last token is always computed).
inline std::vector<uint64_t> PrefixBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                                               uint64_t salt) {
  std::vector<uint64_t> out;
  if (tokens.empty() || block_size <= 0) return out;
  const size_t n = (tokens.size() - 1) / block_size;
  uint64_t parent = salt;
  for (size_t i = 0; i < n; ++i) {
    parent = ChainBlockHash(parent, tokens.data() + i * block_size, block_size);
    out.push_back(parent);
  }
  return out;
}

}  // namespace tandem::kv

#endif  // TANDEM_COMMON_KV_BLOCK_HASH_H_
