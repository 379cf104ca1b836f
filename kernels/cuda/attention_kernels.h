// Launchers of the CUDA attention kernels (attention_kernels.cu), plain types only so
// that host code can include this without CUDA headers. All pointers are device
// memory. Returns the cudaError_t of the launch (0 = cudaSuccess).
//
// LaunchPagedAttention serves decode (and, batch-invariant, everything): query row r
// (token at position positions[r] of the sequence s with q_indptr[s] ≤ r <
// q_indptr[s+1]) attends to keys 0..positions[r] of its sequence, split into at most
// `max_splits` ranges of about `keys_per_split` keys (split-K; one split for short
// contexts; the split points depend only on the row's key count). Each (row, KV head,
// split) thread block computes all query heads of that KV head (GQA: each K/V element
// read once for them, at most 16 per KV head), walks its keys in tiles of 128 with the
// online softmax of attention_tile.h in float32, and writes partials (m, l, acc); a
// second kernel merges each (row, head)'s partials in split order and normalizes.
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_
#define TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_

#include <cstdint>

#include "kernels/cuda/attention_tile.h"
#include "kernels/cuda/ops_kernels.h"

namespace tandem::kernels::cuda {

struct AttentionLaunch {
  const float* q = nullptr;     // [rows][n_heads][head_dim]
  const void* cache = nullptr;  // the paged KV cache (geometry below), elements cache_type
  Elem cache_type = Elem::kF32;
  tile::KvGeometry geometry;
  int32_t layer = 0;
  const int32_t* q_indptr = nullptr;   // [seqs + 1] query rows of each sequence
  const int32_t* positions = nullptr;  // [rows] each row's position in its sequence
  int32_t seqs = 0;
  const int32_t* block_indptr = nullptr;  // [seqs + 1]
  const int32_t* block_ids = nullptr;     // block tables, concatenated
  int32_t rows = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;  // ≤ 256
  float scale = 0;
  int32_t window = 0;  // > 0: row at position p sees keys p − window + 1 .. p
  float softcap = 0;   // > 0: scores x → softcap · tanh(x / softcap)
  int32_t keys_per_split = 512;
  int32_t max_splits = 32;
  float* workspace = nullptr;  // [rows][n_heads][max_splits][head_dim + 2]
  float* out = nullptr;        // [rows][n_heads][head_dim]
  void* stream = nullptr;      // cudaStream_t
};

// Floats of workspace AttentionLaunch needs.
inline int64_t AttentionWorkspaceFloats(int32_t rows, int32_t n_heads, int32_t max_splits,
                                        int32_t head_dim) {
  return int64_t{rows} * n_heads * max_splits * (head_dim + 2);
}

int LaunchPagedAttention(const AttentionLaunch& a);

// Whether LaunchPrefillAttention has a kernel for this head dim (64 or 128).
inline bool PrefillAttentionSupports(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

// The same attention, FlashAttention-2 style on the tensor cores (for prefill): one
// thread block per 64 query rows of one sequence × one head, 4 warps of 16 rows; keys
// in tiles of 64 staged in shared memory as bf16; S = Q·Kᵀ and O += P·V with
// mma.sync m16n8k16 bf16 → f32 (fragments: mma_fragment.h); the online softmax in
// registers. Q, K, V and P are rounded to bf16, so results agree with the float32
// kernel to about 1e-2, not 1e-5. Uses neither `workspace` nor the split fields.
int LaunchPrefillAttention(const AttentionLaunch& a);

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_
