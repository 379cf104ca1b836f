// KvCache: the bytes of the paged KV cache (host memory, float32).
//
// Layout of one block, contiguous so a block travels as one piece:
//   [layer][K|V] where
//     K: [n_kv_heads][head_dim][block_size]   (transposed: a key dimension of 16
//                                              slots is one vector for attention)
//     V: [block_size][n_kv_heads][head_dim]
//   float32; blocks follow each other: block b starts at b * BlockElements(). Bytes per
// token = 2 × layers × kv_heads × head_dim × 4.
//
// The cache is sized by a byte budget. It owns its memory; it does not know which
// sequence uses which block (BlockManager does). Concurrent writers must touch
// different (block, slot) pairs; the engine guarantees that.
#ifndef TANDEM_COMMON_KV_KV_CACHE_H_
#define TANDEM_COMMON_KV_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::kv {

struct KvLayout {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;

  int64_t TokenElements() const { return int64_t{2} * n_layers * n_kv_heads * head_dim; }
  int64_t BytesPerToken() const { return TokenElements() * sizeof(float); }
  int64_t BlockElements() const { return TokenElements() * block_size; }
  int64_t BlockBytes() const { return BlockElements() * sizeof(float); }
  // Elements from one layer's K (or V) part to the next part.
  int64_t PartStride() const { return int64_t{block_size} * n_kv_heads * head_dim; }
  int64_t LayerStride() const { return 2 * PartStride(); }
};

class KvCache {
 public:
  // As many blocks as fit in `budget_bytes` (at least one, else InvalidArgument).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvLayout& layout,
                                                         int64_t budget_bytes);

  const KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return int64_t{num_blocks_} * layout_.BlockBytes(); }

  // K (part 0, [n_kv_heads][head_dim][block_size]) or V (part 1,
  // [block_size][n_kv_heads][head_dim]) of `layer` in `block`.
  float* Part(int32_t block, int32_t layer, int part) {
    return data_.get() + block * layout_.BlockElements() + layer * layout_.LayerStride() +
           part * layout_.PartStride();
  }
  const float* Part(int32_t block, int32_t layer, int part) const {
    return const_cast<KvCache*>(this)->Part(block, layer, part);
  }
  float* Block(int32_t block) { return data_.get() + block * layout_.BlockElements(); }

 private:
  KvCache(const KvLayout& layout, int32_t num_blocks);
  KvLayout layout_;
  int32_t num_blocks_;
  std::unique_ptr<float[]> data_;  // [num_blocks][BlockElements()]
};

}  // namespace tandem::kv

#endif  // TANDEM_COMMON_KV_KV_CACHE_H_
