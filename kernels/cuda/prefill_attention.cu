// CUDA prefill attention on the tensor cores, FlashAttention-2 style (contract in
// attention_kernels.h): mma.sync m16n8k16 bf16 → f32, fragments as mma_fragment.h
// lays them out, the online softmax of attention_tile.h in registers. Its tile
// algorithm, fragment maps included, is emulated on the CPU by attention_mma_test.cc;
// the kernel itself runs only on a GPU (attention_gpu_test.cc, engine_gpu_test.cc), and
// check_ptx.sh makes sure at build time that it uses the tensor cores.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_device.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/mma_fragment.h"

namespace tandem::kernels::cuda {

namespace {

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

}  // namespace tandem::kernels::cuda
