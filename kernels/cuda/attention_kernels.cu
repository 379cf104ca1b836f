// CUDA attention over the paged KV cache: partial kernel (one thread block per query
// row × head × split) and merge kernel. The per-tile math is attention_tile.h, the same
// code attention_tile_test.cc checks on the CPU; attention_gpu_test.cc compares this
// file's results with PagedAttentionReference on a device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/mma_fragment.h"

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

// The first key the row at `pos` sees.
__device__ int FirstKey(int pos, int window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// A scaled score, soft-capped when softcap > 0.
__device__ float SoftCap(float x, float softcap) {
  return softcap > 0.f ? softcap * tanhf(x / softcap) : x;
}

__device__ float ToFloat(float x) { return x; }
__device__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float ToFloat(__half x) { return __half2float(x); }

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

// --- prefill on the tensor cores -------------------------------------------------

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t PackBf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// d += a · b on the tensor cores (layouts: mma_fragment.h).
__device__ __forceinline__ void Mma(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ float QuadMax(float v) {
  for (int m = 1; m <= 2; m <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float QuadSum(float v) {
  for (int m = 1; m <= 2; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

template <class T, int D>
__global__ void __launch_bounds__(mma::kWarps * 32) PrefillKernel(AttentionLaunch a) {
  constexpr int kKs = D / 16;          // k-steps of Q·Kᵀ
  constexpr int kSt = mma::kKeys / 8;  // 8-key column tiles of S
  constexpr int kOt = D / 8;           // 8-dim column tiles of O
  constexpr int kPad = D + 8;          // shared rows padded against bank conflicts
  int32_t seq, row0;
  if (!mma::TileOf(a.q_indptr, a.seqs, blockIdx.x, &seq, &row0)) return;
  const int h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int kvh = tile::KvHeadOf(h, a.n_heads, a.n_kv_heads);
  const int row_end = a.q_indptr[seq + 1];
  const int32_t* table = a.block_ids + a.block_indptr[seq];
  const T* cache = static_cast<const T*>(a.cache);
  // Positions rise within a sequence: the block's last row sees the most keys.
  const int keys = a.positions[min(row0 + mma::kQRows, row_end) - 1] + 1;
  // With a window, tiles before the block's first row's first key are skipped.
  const int first = FirstKey(a.positions[row0], a.window) / mma::kKeys * mma::kKeys;
  const int r_lo = row0 + 16 * warp + lane / 4, r_hi = r_lo + 8;
  const int pos_lo = r_lo < row_end ? a.positions[r_lo] : -1;
  const int pos_hi = r_hi < row_end ? a.positions[r_hi] : -1;

  // This warp's 16 query rows as A fragments, pre-scaled (rows past the sequence: 0).
  uint32_t qf[kKs][4];
#pragma unroll
  for (int ks = 0; ks < kKs; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const mma::Index x = mma::ElemA(lane, 2 * r + e);
        const int row = row0 + 16 * warp + x.row;
        v[e] =
            row < row_end
                ? a.q[(static_cast<int64_t>(row) * a.n_heads + h) * D + 16 * ks + x.col] * a.scale
                : 0.f;
      }
      qf[ks][r] = PackBf16(v[0], v[1]);
    }
  }

  __shared__ __align__(16) __nv_bfloat16 ks_tile[mma::kKeys][kPad];  // [key][d]
  __shared__ __align__(16) __nv_bfloat16 vs_tile[mma::kKeys][kPad];  // [key][d]
  float o[kOt][4];
#pragma unroll
  for (int t = 0; t < kOt; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
  tile::OnlineSoftmax lo, hi;  // this lane's share of rows g and g + 8 (l partial)

  for (int k0 = first; k0 < keys; k0 += mma::kKeys) {
    __syncthreads();  // the previous tile is no longer read
    // K: consecutive threads take consecutive keys of one dimension (contiguous slots
    // in the transposed K layout); V: consecutive dimensions of one key.
    for (int idx = tid; idx < mma::kKeys * D; idx += mma::kWarps * 32) {
      const int kk = idx % mma::kKeys, d = idx / mma::kKeys;
      float kv = 0.f;
      if (k0 + kk < keys) {
        int32_t block, slot;
        tile::Locate(table, k0 + kk, a.geometry.block_size, &block, &slot);
        kv = ToFloat(cache[a.geometry.K(block, a.layer, kvh, d, slot)]);
      }
      ks_tile[kk][d] = __float2bfloat16_rn(kv);
    }
    for (int idx = tid; idx < mma::kKeys * D; idx += mma::kWarps * 32) {
      const int kk = idx / D, d = idx % D;
      float vv = 0.f;
      if (k0 + kk < keys) {
        int32_t block, slot;
        tile::Locate(table, k0 + kk, a.geometry.block_size, &block, &slot);
        vv = ToFloat(cache[a.geometry.V(block, a.layer, kvh, d, slot)]);
      }
      vs_tile[kk][d] = __float2bfloat16_rn(vv);
    }
    __syncthreads();

    // S = (Q·scale) · Kᵀ for 16 rows × 64 keys.
    float s[kSt][4];
#pragma unroll
    for (int nt = 0; nt < kSt; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kKs; ++ks) {
        uint32_t b[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const mma::Index x = mma::ElemB(lane, 2 * r);  // (d, key); b_{2r+1} is d + 1
          b[r] = *reinterpret_cast<const uint32_t*>(&ks_tile[8 * nt + x.col][16 * ks + x.row]);
        }
        Mma(s[nt], qf[ks], b);
      }
    }
    // Causal mask, then the online softmax of each of this lane's two rows.
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kSt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const mma::Index x = mma::ElemC(lane, i);
        const int key = k0 + 8 * nt + x.col;
        const int q_pos = i < 2 ? pos_lo : pos_hi;
        s[nt][i] = SoftCap(s[nt][i], a.softcap);
        if (key >= keys || !mma::Visible(key, q_pos, a.window)) s[nt][i] = -INFINITY;
        if (i < 2) {
          mx_lo = fmaxf(mx_lo, s[nt][i]);
        } else {
          mx_hi = fmaxf(mx_hi, s[nt][i]);
        }
      }
    }
    const float f_lo = lo.Rescale(QuadMax(mx_lo)), f_hi = hi.Rescale(QuadMax(mx_hi));
#pragma unroll
    for (int nt = 0; nt < kSt; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        tile::OnlineSoftmax& sm = i < 2 ? lo : hi;
        s[nt][i] = sm.Weight(s[nt][i]);
        sm.Add(s[nt][i]);
      }
    }
#pragma unroll
    for (int t = 0; t < kOt; ++t) {
      o[t][0] *= f_lo;
      o[t][1] *= f_lo;
      o[t][2] *= f_hi;
      o[t][3] *= f_hi;
    }
    // O += P · V, P straight from the S accumulators.
#pragma unroll
    for (int j = 0; j < mma::kKeys / 16; ++j) {
      uint32_t p[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p[r] = PackBf16(mma::PFromS(s[2 * j], s[2 * j + 1], 2 * r),
                        mma::PFromS(s[2 * j], s[2 * j + 1], 2 * r + 1));
      }
#pragma unroll
      for (int t = 0; t < kOt; ++t) {
        uint32_t b[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const mma::Index x = mma::ElemB(lane, 2 * r);  // (key, d); b_{2r+1} is key + 1
          b[r] = PackBf16(vs_tile[16 * j + x.row][8 * t + x.col],
                          vs_tile[16 * j + x.row + 1][8 * t + x.col]);
        }
        Mma(o[t], p, b);
      }
    }
  }

  const float l_lo = QuadSum(lo.l), l_hi = QuadSum(hi.l);
  const float n_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, n_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
#pragma unroll
  for (int t = 0; t < kOt; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const mma::Index x = mma::ElemC(lane, i);
      const int row = row0 + 16 * warp + x.row;
      if (row >= row_end) continue;
      a.out[(static_cast<int64_t>(row) * a.n_heads + h) * D + 8 * t + x.col] =
          o[t][i] * (i < 2 ? n_lo : n_hi);
    }
  }
}

template <class T>
int LaunchPrefill(const AttentionLaunch& a, cudaStream_t stream) {
  const dim3 grid((a.rows + mma::kQRows - 1) / mma::kQRows + a.seqs, a.n_heads);
  if (a.head_dim == 64) {
    PrefillKernel<T, 64><<<grid, mma::kWarps * 32, 0, stream>>>(a);
  } else {
    PrefillKernel<T, 128><<<grid, mma::kWarps * 32, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

int LaunchPrefillAttention(const AttentionLaunch& a) {
  if (a.rows == 0) return cudaSuccess;
  if (!PrefillAttentionSupports(a.head_dim)) return cudaErrorInvalidValue;
  auto stream = static_cast<cudaStream_t>(a.stream);
  switch (a.cache_type) {
    case Elem::kBF16:
      return LaunchPrefill<__nv_bfloat16>(a, stream);
    case Elem::kF16:
      return LaunchPrefill<__half>(a, stream);
    default:
      return LaunchPrefill<float>(a, stream);
  }
}

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
      PartialKernel<float><<<grid, kThreads, 0, stream>>>(a);
      break;
    case Elem::kBF16:
      PartialKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
      break;
    case Elem::kF16:
      PartialKernel<__half><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  MergeKernel<<<dim3(a.rows, a.n_heads), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::cuda
