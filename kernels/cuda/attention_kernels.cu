// CUDA attention over the paged KV cache: partial kernel (one thread block per query
// row × head × split) and merge kernel. The per-tile math is attention_tile.h, the same
// code attention_tile_test.cc checks on the CPU; attention_gpu_test.cc compares this
// file's results with PagedAttentionReference on a device.
#include <cuda_runtime.h>

#include "kernels/cuda/attention_kernels.h"

namespace tandem::kernels::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 32;
constexpr int kMaxHeadDim = 256;

__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Partial (m, l, acc) of one query row × head over one key range.
__global__ void PartialKernel(AttentionLaunch a) {
  const int row = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int d = a.head_dim;
  const int pos = a.row_pos[row];
  const int keys = pos + 1;
  const int splits = tile::NumSplits(keys, a.keys_per_split, a.max_splits);
  float* part =
      a.workspace + ((static_cast<int64_t>(row) * a.n_heads + h) * a.max_splits + split) * (d + 2);
  if (split >= splits) {
    if (tid == 0) {
      part[0] = -INFINITY;
      part[1] = 0.f;
    }
    for (int i = tid; i < d; i += kThreads) part[2 + i] = 0.f;
    return;
  }
  const int per = (keys + splits - 1) / splits;
  const int k_begin = split * per;
  const int k_end = min(keys, k_begin + per);
  const int32_t* table = a.block_ids + a.block_indptr[a.row_seq[row]];
  const int kvh = tile::KvHeadOf(h, a.n_heads, a.n_kv_heads);

  __shared__ float q[kMaxHeadDim];
  __shared__ float s[kTileKeys];
  __shared__ int64_t v_base[kTileKeys];  // each key's V row (dimension 0), located once
  __shared__ float factor;
  tile::OnlineSoftmax sm;  // thread 0's; the others read the tile weights from s[]
  const float* q_row = a.q + (static_cast<int64_t>(row) * a.n_heads + h) * d;
  for (int i = tid; i < d; i += kThreads) q[i] = q_row[i];
  float acc[kMaxHeadDim / kThreads] = {0.f, 0.f};
  __syncthreads();

  for (int t0 = k_begin; t0 < k_end; t0 += kTileKeys) {
    const int n = min(kTileKeys, k_end - t0);
    for (int j = warp; j < n; j += kWarps) {
      int32_t block, slot;
      tile::Locate(table, t0 + j, a.geometry.block_size, &block, &slot);
      float dot = 0.f;
      for (int i = lane; i < d; i += 32)
        dot += q[i] * a.cache[a.geometry.K(block, a.layer, kvh, i, slot)];
      dot = WarpSum(dot);
      if (lane == 0) {
        s[j] = dot * a.scale;
        v_base[j] = a.geometry.V(block, a.layer, kvh, 0, slot);
      }
    }
    __syncthreads();
    if (tid == 0) {
      float tile_max = -INFINITY;
      for (int j = 0; j < n; ++j) tile_max = fmaxf(tile_max, s[j]);
      factor = sm.Rescale(tile_max);
      for (int j = 0; j < n; ++j) {
        s[j] = sm.Weight(s[j]);
        sm.Add(s[j]);
      }
    }
    __syncthreads();
    // Unrolled with a guard (not a dynamic bound) so acc[] stays in registers.
#pragma unroll
    for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
      const int i = c * kThreads + tid;
      if (i >= d) break;
      float v = acc[c] * factor;
      for (int j = 0; j < n; ++j) v += s[j] * a.cache[v_base[j] + i];
      acc[c] = v;
    }
    __syncthreads();
  }
  if (tid == 0) {
    part[0] = sm.m;
    part[1] = sm.l;
  }
#pragma unroll
  for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
    if (c * kThreads + tid < d) part[2 + c * kThreads + tid] = acc[c];
  }
}

// out = merge of the partials of one row × head, normalized. Splits merge in order,
// so a row's result does not depend on the rest of the batch.
__global__ void MergeKernel(AttentionLaunch a) {
  const int row = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int d = a.head_dim;
  const float* parts =
      a.workspace + (static_cast<int64_t>(row) * a.n_heads + h) * a.max_splits * (d + 2);
  float* o = a.out + (static_cast<int64_t>(row) * a.n_heads + h) * d;
  for (int i = tid; i < d; i += blockDim.x) {
    float m = -INFINITY, l = 0.f, acc = 0.f;
    for (int sp = 0; sp < a.max_splits; ++sp) {
      const float* p = parts + sp * (d + 2);
      float m2, l2, wa, wb;
      tile::MergeWeights(m, l, p[0], p[1], &m2, &l2, &wa, &wb);
      acc = wa * acc + wb * p[2 + i];
      m = m2;
      l = l2;
    }
    o[i] = l > 0.f ? acc / l : 0.f;
  }
}

}  // namespace

int LaunchPagedAttention(const AttentionLaunch& a) {
  if (a.rows == 0) return cudaSuccess;
  if (a.head_dim > kMaxHeadDim || a.max_splits < 1) return cudaErrorInvalidValue;
  auto stream = static_cast<cudaStream_t>(a.stream);
  PartialKernel<<<dim3(a.rows, a.n_heads, a.max_splits), kThreads, 0, stream>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  MergeKernel<<<dim3(a.rows, a.n_heads), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::cuda
