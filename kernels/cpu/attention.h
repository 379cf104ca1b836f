// Causal attention of new tokens over a paged KV cache (GQA-aware), float32.
//
// The batch is described CSR-style, as FlashInfer does:
//   q_indptr[s] .. q_indptr[s+1]        rows of q / out that belong to sequence s
//   kv_len[s]                           tokens of s in the cache, including the new
//                                       ones (whose K/V are already written); the new
//                                       rows are the last q_len of them, in order
//   block_indptr[s] .. block_indptr[s+1] entries of `block_ids` = s's block table
// Shapes: q, out [n_tokens][n_heads][head_dim]; cache blocks as kv::KvLayout says,
// in float32, bfloat16 or float16 (converted to float32 as they are read; written
// with round-to-nearest-even).
//
// Query row t at position p attends to cache positions FirstKey(p)..p (0..p without a
// sliding window; scores soft-capped where the shape says), visited in order with a
// fixed summation order, so its result does not depend on the rest of the batch or on
// how the prompt was split into steps. AttentionReference gathers K/V into
// contiguous arrays and computes in double.
#ifndef TANDEM_KERNELS_CPU_ATTENTION_H_
#define TANDEM_KERNELS_CPU_ATTENTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "common/kv/kv_layout.h"
#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

struct PagedBatch {
  std::span<const int32_t> q_indptr;      // [n_seqs + 1]
  std::span<const int32_t> kv_len;        // [n_seqs]
  std::span<const int32_t> block_indptr;  // [n_seqs + 1]
  std::span<const int32_t> block_ids;     // [block_indptr.back()]
  int32_t num_seqs() const { return static_cast<int32_t>(kv_len.size()); }
};

// KV bytes as host memory (the CPU backend's own mapping of its KvStorage, or a
// test's array). Part<T>: K (part 0, [n_kv_heads][head_dim][block_size]) or V (part 1,
// [block_size][n_kv_heads][head_dim]) of `layer` in `block`; T is the element type
// (float for f32, uint16_t for bf16 / f16).
struct KvView {
  kv::KvLayout layout;
  int32_t num_blocks = 0;
  uint8_t* data = nullptr;  // [num_blocks][BlockBytes()]

  template <class T = float>
  T* Part(int32_t block, int32_t layer, int part) const {
    return reinterpret_cast<T*>(data + block * layout.BlockBytes() +
                                (layer * layout.LayerStride() + part * layout.PartStride()) *
                                    layout.ElementBytes());
  }
  template <class T = float>
  T* Block(int32_t block) const {
    return reinterpret_cast<T*>(data + block * layout.BlockBytes());
  }
};

// slot[t] = block × block_size + offset of the cache slot new row t is written to.
inline std::vector<int32_t> SlotMapping(const PagedBatch& b, int32_t block_size) {
  std::vector<int32_t> slots(b.q_indptr.empty() ? 0 : b.q_indptr.back());
  SlotMapping(b.q_indptr, b.kv_len, b.block_indptr, b.block_ids, block_size, slots.data());
  return slots;
}

// Writes k, v [n_tokens][n_kv_heads][head_dim] of layer `layer` into the cache slots
// `slots` [n_tokens] (SlotMapping).
void WriteKv(const float* k, const float* v, std::span<const int32_t> slots, int32_t layer,
             const KvView& cache);

// `sinks` [n_heads] or null: attention sinks (gpt-oss), one logit per query head that
// joins each softmax's normaliser — Z += exp(sink − m), m the largest of the scores and
// the sink — and weighs no value.
void PagedAttention(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                    int32_t layer, const KvView& cache, float* out, ThreadPool* pool,
                    const float* sinks = nullptr);

void PagedAttentionReference(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                             int32_t layer, const KvView& cache, float* out,
                             const float* sinks = nullptr);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_ATTENTION_H_
