// Launchers of the CUDA attention kernels (attention_kernels.cu), plain types only so
// that host code can include this without CUDA headers. All pointers are device
// memory. Returns the cudaError_t of the launch (0 = cudaSuccess).
//
// One algorithm serves prefill and decode: query row r (token at position pos[r] of
// sequence seq[r]) attends to keys 0..pos[r] of its sequence, split into at most
// `max_splits` ranges of about `keys_per_split` keys (split-K; one split for short
// contexts). Each (row, head, split) thread block walks its keys in tiles of 32 with
// the online softmax of attention_tile.h and writes a partial (m, l, acc); a second
// kernel merges the partials of each (row, head) and normalizes.
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_
#define TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_

#include <cstdint>

#include "kernels/cuda/attention_tile.h"

namespace tandem::kernels::cuda {

struct AttentionLaunch {
  const float* q = nullptr;      // [rows][n_heads][head_dim]
  const float* cache = nullptr;  // the paged float32 KV cache (geometry below)
  tile::KvGeometry geometry;
  int32_t layer = 0;
  const int32_t* row_seq = nullptr;       // [rows] sequence of each query row
  const int32_t* row_pos = nullptr;       // [rows] its position in the sequence
  const int32_t* block_indptr = nullptr;  // [seqs + 1]
  const int32_t* block_ids = nullptr;     // block tables, concatenated
  int32_t rows = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;  // ≤ 256
  float scale = 0;
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

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_ATTENTION_KERNELS_H_
