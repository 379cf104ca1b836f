// CUDA attention over the paged KV cache, split-K (decode, and every pass in
// batch-invariant mode): the partial kernel (one thread block per query row × KV head ×
// split) and the merge kernel. The per-tile math is attention_tile.h, the same code
// attention_tile_test.cc checks on the CPU; this file is also compiled for the CPU shim
// (on_cpu/attention_kernels.cc), where kernels_on_cpu_test.cc runs it against
// PagedAttentionReference, and attention_gpu_test.cc does the same on a device. The
// tensor-core prefill kernel is prefill_attention.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_device.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = kThreads;  // one key per thread while scoring
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;  // query heads per KV head

__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sequence owning query row `row`: the last s with q_indptr[s] ≤ row.
__device__ int SequenceOf(const int32_t* q_indptr, int seqs, int row) {
  int lo = 0, hi = seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_indptr[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Partial (m, l, acc) of one query row over one key range, for all G = n_heads /
// n_kv_heads query heads of one KV head at once: each K and V element is read once
// for the G heads. Lane l of warp w scores key t0 + 32w + l against the G queries
// (consecutive lanes read consecutive slots of the transposed K: coalesced); warp w
// runs the online softmax of heads w, w + 4, ... with warp reductions; thread t
// accumulates dimensions t and t + 128 of every head from V rows read across the
// block (coalesced). T is the cache's element type.
template <class T>
__global__ void __launch_bounds__(kThreads) PartialKernel(AttentionLaunch a) {
  const int row = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int d = a.head_dim;
  const int G = a.n_heads / a.n_kv_heads, h0 = kvh * G;
  const T* cache = static_cast<const T*>(a.cache);
  const int pos = a.positions[row];
  const int first = FirstKey(pos, a.window);
  const int keys = pos + 1 - first;  // keys first .. pos
  const int splits = tile::NumSplits(keys, a.keys_per_split, a.max_splits);
  auto part = [&](int g) {
    return a.workspace +
           ((static_cast<int64_t>(row) * a.n_heads + h0 + g) * a.max_splits + split) * (d + 2);
  };
  if (split >= splits) {
    for (int i = tid; i < G * (d + 2); i += kThreads) {
      const int g = i / (d + 2), c = i % (d + 2);
      part(g)[c] = c == 0 ? -INFINITY : 0.f;
    }
    return;
  }
  const int per = (keys + splits - 1) / splits;
  const int k_begin = first + split * per;
  const int k_end = min(pos + 1, k_begin + per);
  const int32_t* table = a.block_ids + a.block_indptr[SequenceOf(a.q_indptr, a.seqs, row)];

  __shared__ float q[kMaxGroup][kMaxHeadDim];
  __shared__ float s[kMaxGroup][kTileKeys];
  __shared__ int64_t v_base[kTileKeys];  // each key's V row (dimension 0), located once
  __shared__ float factor[kMaxGroup];
  for (int i = tid; i < G * d; i += kThreads) {
    q[i / d][i % d] = a.q[(static_cast<int64_t>(row) * a.n_heads + h0) * d + i];
  }
  tile::OnlineSoftmax sm[kMaxGroup / kWarps];  // heads warp + kWarps·r (same in every lane)
  float acc[kMaxGroup][kMaxHeadDim / kThreads];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
#pragma unroll
    for (int c = 0; c < kMaxHeadDim / kThreads; ++c) acc[g][c] = 0.f;
  }
  __syncthreads();

  for (int t0 = k_begin; t0 < k_end; t0 += kTileKeys) {
    const int n = min(kTileKeys, k_end - t0);
    const int j = tid;  // this thread's key in the tile
    if (j < n) {
      int32_t block, slot;
      tile::Locate(table, t0 + j, a.geometry.block_size, &block, &slot);
      float dot[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) dot[g] = 0.f;
      for (int i = 0; i < d; ++i) {
        const float k = ToFloat(cache[a.geometry.K(block, a.layer, kvh, i, slot)]);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < G) dot[g] += q[g][i] * k;
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) s[g][j] = SoftCap(dot[g] * a.scale, a.softcap);
      }
      v_base[j] = a.geometry.V(block, a.layer, kvh, 0, slot);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kMaxGroup / kWarps; ++r) {
      const int g = warp + kWarps * r;
      if (g >= G) continue;
      float mx = -INFINITY;
      for (int jj = lane; jj < n; jj += 32) mx = fmaxf(mx, s[g][jj]);
      const float f = sm[r].Rescale(WarpMax(mx));
      float sum = 0.f;
      for (int jj = lane; jj < n; jj += 32) {
        const float w = sm[r].Weight(s[g][jj]);
        s[g][jj] = w;
        sum += w;
      }
      sm[r].Add(WarpSum(sum));
      if (lane == 0) factor[g] = f;
    }
    __syncthreads();
    // Unrolled with guards (not dynamic bounds) so acc[][] stays in registers.
#pragma unroll
    for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
      const int i = c * kThreads + tid;
      if (i >= d) break;
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) acc[g][c] *= factor[g];
      }
      for (int jj = 0; jj < n; ++jj) {
        const float v = ToFloat(cache[v_base[jj] + i]);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < G) acc[g][c] += s[g][jj] * v;
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kMaxGroup / kWarps; ++r) {
    const int g = warp + kWarps * r;
    if (g < G && lane == 0) {
      part(g)[0] = sm[r].m;
      part(g)[1] = sm[r].l;
    }
  }
#pragma unroll
  for (int c = 0; c < kMaxHeadDim / kThreads; ++c) {
    const int i = c * kThreads + tid;
    if (i >= d) break;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < G) part(g)[2 + i] = acc[g][c];
    }
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
  if (a.head_dim > kMaxHeadDim || a.max_splits < 1 || a.n_kv_heads < 1 ||
      a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > kMaxGroup) {
    return cudaErrorInvalidValue;
  }
  auto stream = static_cast<cudaStream_t>(a.stream);
  const dim3 grid(a.rows, a.n_kv_heads, a.max_splits);
  switch (a.cache_type) {
    case Elem::kF32:
      TANDEM_LAUNCH(PartialKernel<float>, grid, kThreads, stream)(a);
      break;
    case Elem::kBF16:
      TANDEM_LAUNCH(PartialKernel<__nv_bfloat16>, grid, kThreads, stream)(a);
      break;
    case Elem::kF16:
      TANDEM_LAUNCH(PartialKernel<__half>, grid, kThreads, stream)(a);
      break;
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  TANDEM_LAUNCH(MergeKernel, dim3(a.rows, a.n_heads), 128, stream)(a);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::cuda
