// Causal attention of new tokens over a paged KV cache (GQA-aware), float32.
//
// The batch is described CSR-style, as FlashInfer does:
//   q_indptr[s] .. q_indptr[s+1]        rows of q / out that belong to sequence s
//   kv_len[s]                           tokens of s in the cache, including the new
//                                       ones (whose K/V are already written); the new
//                                       rows are the last q_len of them, in order
//   block_indptr[s] .. block_indptr[s+1] entries of `block_ids` = s's block table
// Shapes: q, out [n_tokens][n_heads][head_dim]; cache blocks as in kv::KvCache.
//
// Query row t at position p attends to cache positions 0..p, visited in order with a
// fixed summation order, so its result does not depend on the rest of the batch or on
// how the prompt was split into steps. AttentionReference gathers K/V into
// contiguous arrays and computes in double.
#ifndef TANDEM_KERNELS_CPU_ATTENTION_H_
#define TANDEM_KERNELS_CPU_ATTENTION_H_

#include <cstdint>
#include <span>

#include "common/kv/kv_cache.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

struct PagedBatch {
  std::span<const int32_t> q_indptr;      // [n_seqs + 1]
  std::span<const int32_t> kv_len;        // [n_seqs]
  std::span<const int32_t> block_indptr;  // [n_seqs + 1]
  std::span<const int32_t> block_ids;     // [block_indptr.back()]
  int32_t num_seqs() const { return static_cast<int32_t>(kv_len.size()); }
};

struct AttentionShape {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
};

// Writes k, v [n_tokens][n_kv_heads][head_dim] of layer `layer` into the cache at the
// positions the new rows of each sequence occupy.
void WriteKv(const float* k, const float* v, const PagedBatch& batch, int32_t layer,
             kv::KvCache* cache);

void PagedAttention(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                    int32_t layer, const kv::KvCache& cache, float* out, ThreadPool* pool);

void PagedAttentionReference(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                             int32_t layer, const kv::KvCache& cache, float* out);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_ATTENTION_H_
