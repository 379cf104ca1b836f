// The per-tile math of tandem's GPU attention kernels, written once for host and
// device (each kernel's tile math in small __host__ __device__ functions, so the tiled
// algorithm can be checked on the CPU: docs/architecture.md, "The CUDA backend").
//
//   Locate / KvGeometry  paged index arithmetic over the cache layout of
//                        kv::KvLayout (K [kv_heads][head_dim][block_size], V
//                        [block_size][kv_heads][head_dim], per layer per block)
//   OnlineSoftmax        FlashAttention's running max / running sum over key tiles
//   MergeWeights         split-K: the weights that combine two partial results over
//                        disjoint key ranges
//
// attention_tile_test.cc runs the tiled prefill and split-K decode algorithms in plain
// loops with these functions against PagedAttentionReference; attention_kernels.cu
// and prefill_attention.cu run the same functions on the GPU.
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_TILE_H_
#define TANDEM_KERNELS_CUDA_ATTENTION_TILE_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif

namespace tandem::kernels::tile {

// Element offsets (any element type) into a paged KV cache laid out as kv::KvLayout
// documents.
struct KvGeometry {
  int64_t block_elems = 0;   // floats per block (all layers, K and V)
  int64_t layer_stride = 0;  // floats from one layer's K part to the next layer's
  int64_t part_stride = 0;   // floats from a layer's K part to its V part
  int32_t block_size = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;

  TANDEM_HD int64_t K(int32_t block, int32_t layer, int32_t kvh, int32_t d, int32_t slot) const {
    return block * block_elems + layer * layer_stride +
           (static_cast<int64_t>(kvh) * head_dim + d) * block_size + slot;
  }
  TANDEM_HD int64_t V(int32_t block, int32_t layer, int32_t kvh, int32_t d, int32_t slot) const {
    return block * block_elems + layer * layer_stride + part_stride +
           (static_cast<int64_t>(slot) * n_kv_heads + kvh) * head_dim + d;
  }
};

// Block id and slot of position `pos` of a sequence with block table `table`.
TANDEM_HD void Locate(const int32_t* table, int32_t pos, int32_t block_size, int32_t* block,
                      int32_t* slot) {
  *block = table[pos / block_size];
  *slot = pos % block_size;
}

// The KV head query head `head` reads (GQA: consecutive query heads share one).
TANDEM_HD int32_t KvHeadOf(int32_t head, int32_t n_heads, int32_t n_kv_heads) {
  return head / (n_heads / n_kv_heads);
}

// Running softmax state of one query row over the key tiles seen so far:
// m = max score, l = Σ exp(score - m). The output accumulator acc = Σ exp(s - m)·v.
struct OnlineSoftmax {
  float m = -INFINITY;
  float l = 0.f;

  // Folds in a tile whose largest score is `tile_max` (-inf if every key is masked):
  // returns the factor by which acc (and the sum) must be rescaled; afterwards the
  // weight of a score s in this tile is Weight(s).
  TANDEM_HD float Rescale(float tile_max) {
    const float m_new = tile_max > m ? tile_max : m;
    const float factor = m == -INFINITY ? 0.f : expf(m - m_new);
    l *= factor;
    m = m_new;
    return factor;
  }
  TANDEM_HD float Weight(float s) const { return s == -INFINITY ? 0.f : expf(s - m); }
  TANDEM_HD void Add(float weight) { l += weight; }
  // 1 / l, or 0 for a row that saw no key.
  TANDEM_HD float Normalizer() const { return l > 0.f ? 1.f / l : 0.f; }
};

// Split-K: partial states (m_a, l_a) and (m_b, l_b) over disjoint key ranges combine
// into m = max(m_a, m_b), l = w_a·l_a + w_b·l_b, acc = w_a·acc_a + w_b·acc_b.
TANDEM_HD void MergeWeights(float m_a, float l_a, float m_b, float l_b, float* m, float* l,
                            float* w_a, float* w_b) {
  *m = m_a > m_b ? m_a : m_b;
  *w_a = m_a == -INFINITY ? 0.f : expf(m_a - *m);
  *w_b = m_b == -INFINITY ? 0.f : expf(m_b - *m);
  *l = *w_a * l_a + *w_b * l_b;
}

// How many splits a decode row of `kv_len` keys gets: one per `keys_per_split` keys,
// at most `max_splits` (long contexts spread over more thread blocks).
TANDEM_HD int32_t NumSplits(int32_t kv_len, int32_t keys_per_split, int32_t max_splits) {
  const int32_t n = (kv_len + keys_per_split - 1) / keys_per_split;
  return n < 1 ? 1 : (n > max_splits ? max_splits : n);
}

}  // namespace tandem::kernels::tile

#endif  // TANDEM_KERNELS_CUDA_ATTENTION_TILE_H_
