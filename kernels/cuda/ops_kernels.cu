// CUDA kernels of CudaBackend's element-wise and row ops (contracts in ops_kernels.h).
// Also compiled for the CPU shim (on_cpu/ops_kernels.cc): kernels_on_cpu_test.cc runs
// every kernel here against its CPU reference without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/select.h"

namespace tandem::kernels::cuda {

namespace {

constexpr int kThreads = 256;

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for a grid-stride loop over n elements (capped; the loop covers the rest).
unsigned Grid(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__device__ void Report(int32_t* error, int32_t code) { atomicCAS(error, kDeviceOk, code); }

__device__ float Load(const void* p, Elem t, int64_t i) {
  switch (t) {
    case Elem::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case Elem::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ void Store(void* p, Elem t, int64_t i, float x) {
  switch (t) {
    case Elem::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
      break;
    case Elem::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(x);
      break;
    default:
      static_cast<float*>(p)[i] = x;
  }
}

__global__ void EmbeddingKernel(const void* table, Elem type, int64_t rows, int64_t cols,
                                const int32_t* ids, float* out, int32_t* error) {
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r];
  const bool ok = id >= 0 && id < rows;
  if (!ok && threadIdx.x == 0) Report(error, kBadTokenId);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out[r * cols + c] = ok ? Load(table, type, id * cols + c) : 0.f;
  }
}

// Sum over the block in a fixed order: each thread's strided partial, then a tree.
__device__ float BlockSum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

__global__ void RmsNormKernel(const float* x, const float* w, int64_t dim, float eps, float* out) {
  __shared__ float partial[kThreads / 32];
  const float* xr = x + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss, partial);
  const float scale = rsqrtf(ss / static_cast<float>(dim) + eps);
  float* o = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

__global__ void AddRmsNormKernel(float* x, const float* y, const float* w, int64_t dim, float eps,
                                 float* out) {
  __shared__ float partial[kThreads / 32];
  float* xr = x + blockIdx.x * dim;
  const float* yr = y + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = xr[i] + yr[i];
    xr[i] = v;
    ss += v * v;
  }
  ss = BlockSum(ss, partial);
  const float scale = rsqrtf(ss / static_cast<float>(dim) + eps);
  float* o = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

__global__ void RopeTableKernel(const int32_t* positions, int64_t n, const float* ff,
                                int32_t rope_dim, float theta, float position_scale,
                                float attention_factor, float* table) {
  const int32_t half = rope_dim / 2;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * half;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / half;
    const int32_t i = static_cast<int32_t>(e % half);
    // powf's error on the device is a few ulp; the float result of a double pow is the
    // correctly rounded one the CPU's powf gives.
    const float ex = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    float inv = 1.0f / static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(ex)));
    if (ff != nullptr) inv /= ff[i];
    const float angle = (static_cast<float>(positions[t]) / position_scale) * inv;
    // Reduced to [-π, π] in double first: sincosf's own reduction of large angles
    // (long contexts) takes a slow path through local memory; on [-π, π] the fast
    // intrinsic is accurate.
    const double two_pi = 6.283185307179586;
    const double a = static_cast<double>(angle);
    const float r = static_cast<float>(a - rint(a / two_pi) * two_pi);
    float s, c;
    __sincosf(r, &s, &c);  // abs. error ≤ 2^-21.4 on [-π, π]
    table[t * rope_dim + i] = c * attention_factor;
    table[t * rope_dim + half + i] = s * attention_factor;
  }
}

__global__ void RopeKernel(float* x, int64_t n, int32_t n_heads, int32_t head_dim, int32_t rope_dim,
                           bool halves, const float* table) {
  const int32_t half = rope_dim / 2;
  const int64_t total = n * n_heads * half;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int32_t i = static_cast<int32_t>(e % half);
    const int64_t th = e / half;  // token × n_heads + head
    const int64_t t = th / n_heads;
    float* v = x + th * head_dim;
    const float c = table[t * rope_dim + i], s = table[t * rope_dim + half + i];
    const int32_t a = halves ? i : 2 * i, b = halves ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void GeGluKernel(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= factor;
  }
}

__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void AddBiasKernel(float* x, const float* bias, int64_t rows, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * dim;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % dim];
  }
}

__global__ void GatherRowsKernel(const uint32_t* src, int64_t src_rows, int64_t row_words,
                                 const int32_t* idx, uint32_t* dst, int32_t* error) {
  const int64_t r = blockIdx.x;
  const int32_t from = idx[r];
  const bool ok = from >= 0 && from < src_rows;
  if (!ok && threadIdx.x == 0) Report(error, kBadRowIndex);
  for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) {
    dst[r * row_words + w] = ok ? src[from * row_words + w] : 0u;
  }
}

__global__ void WriteKvKernel(const float* k, const float* v, const int32_t* slots, int64_t n,
                              int32_t layer, tile::KvGeometry g, int64_t num_blocks, Elem type,
                              void* cache, int32_t* error) {
  const int64_t per_token = int64_t{g.n_kv_heads} * g.head_dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * per_token;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / per_token;
    const int32_t hd = static_cast<int32_t>(e % per_token);
    const int32_t kvh = hd / g.head_dim, d = hd % g.head_dim;
    const int32_t slot = slots[t];
    if (slot < 0 || slot / g.block_size >= num_blocks) {
      if (hd == 0) Report(error, kBadSlot);
      continue;
    }
    const int32_t block = slot / g.block_size, off = slot % g.block_size;
    Store(cache, type, g.K(block, layer, kvh, d, off), k[e]);
    Store(cache, type, g.V(block, layer, kvh, d, off), v[e]);
  }
}

__global__ void ToBf16Kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(x[i]);
  }
}

__device__ Best ShuffleBest(Best b, int o) {
  return {__shfl_xor_sync(0xffffffffu, b.value, o), __shfl_xor_sync(0xffffffffu, b.id, o)};
}

__global__ void ArgMaxKernel(const float* logits, int64_t cols, int32_t* ids) {
  __shared__ float values[kThreads / 32];
  __shared__ int32_t who[kThreads / 32];
  const float* row = logits + blockIdx.x * cols;
  Best best = NoBest();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    best = Better(best, {row[c], static_cast<int32_t>(c)});
  }
  for (int o = 16; o > 0; o >>= 1) best = Better(best, ShuffleBest(best, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    values[warp] = best.value;
    who[warp] = best.id;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < static_cast<int>(blockDim.x / 32) ? Best{values[lane], who[lane]} : NoBest();
    for (int o = 16; o > 0; o >>= 1) best = Better(best, ShuffleBest(best, o));
    if (lane == 0) ids[blockIdx.x] = best.id < 0 ? 0 : best.id;
  }
}

int Last() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int LaunchEmbedding(const void* table, Elem type, int64_t rows, int64_t cols, const int32_t* ids,
                    int64_t n, float* out, int32_t* error, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(EmbeddingKernel, static_cast<unsigned>(n), kThreads, S(stream))
  (table, type, rows, cols, ids, out, error);
  return Last();
}

int LaunchRmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* out, void* stream) {
  if (rows == 0) return cudaSuccess;
  TANDEM_LAUNCH(RmsNormKernel, static_cast<unsigned>(rows), kThreads, S(stream))
  (x, weight, dim, eps, out);
  return Last();
}

int LaunchAddRmsNorm(float* x, const float* y, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* out, void* stream) {
  if (rows == 0) return cudaSuccess;
  TANDEM_LAUNCH(AddRmsNormKernel, static_cast<unsigned>(rows), kThreads, S(stream))
  (x, y, weight, dim, eps, out);
  return Last();
}

int LaunchRopeTable(const int32_t* positions, int64_t n, const float* freq_factors,
                    int32_t rope_dim, float theta, float position_scale, float attention_factor,
                    float* table, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(RopeTableKernel, Grid(n * rope_dim / 2), kThreads, S(stream))
  (positions, n, freq_factors, rope_dim, theta, position_scale, attention_factor, table);
  return Last();
}

int LaunchRope(float* x, int64_t n, int32_t n_heads, int32_t head_dim, int32_t rope_dim,
               bool halves, const float* table, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(RopeKernel, Grid(n * n_heads * rope_dim / 2), kThreads, S(stream))
  (x, n, n_heads, head_dim, rope_dim, halves, table);
  return Last();
}

int LaunchSwiGlu(const float* gate, const float* up, int64_t n, float* out, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(SwiGluKernel, Grid(n), kThreads, S(stream))(gate, up, n, out);
  return Last();
}

int LaunchGeGlu(const float* gate, const float* up, int64_t n, float* out, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(GeGluKernel, Grid(n), kThreads, S(stream))(gate, up, n, out);
  return Last();
}

int LaunchScale(float* x, int64_t n, float factor, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(ScaleKernel, Grid(n), kThreads, S(stream))(x, n, factor);
  return Last();
}

int LaunchSoftCap(float* x, int64_t n, float cap, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(SoftCapKernel, Grid(n), kThreads, S(stream))(x, n, cap);
  return Last();
}

int LaunchAdd(float* x, const float* y, int64_t n, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(AddKernel, Grid(n), kThreads, S(stream))(x, y, n);
  return Last();
}

int LaunchAddBias(float* x, const float* bias, int64_t rows, int64_t dim, void* stream) {
  if (rows * dim == 0) return cudaSuccess;
  TANDEM_LAUNCH(AddBiasKernel, Grid(rows * dim), kThreads, S(stream))(x, bias, rows, dim);
  return Last();
}

int LaunchGatherRows(const void* src, int64_t src_rows, int64_t row_bytes, const int32_t* idx,
                     int64_t n, void* dst, int32_t* error, void* stream) {
  if (n == 0) return cudaSuccess;
  if (row_bytes % 4 != 0) return cudaErrorInvalidValue;
  TANDEM_LAUNCH(GatherRowsKernel, static_cast<unsigned>(n), kThreads, S(stream))
  (static_cast<const uint32_t*>(src), src_rows, row_bytes / 4, idx, static_cast<uint32_t*>(dst),
   error);
  return Last();
}

int LaunchWriteKv(const float* k, const float* v, const int32_t* slots, int64_t n, int32_t layer,
                  const tile::KvGeometry& g, int64_t num_blocks, Elem type, void* cache,
                  int32_t* error, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(WriteKvKernel, Grid(n * g.n_kv_heads * g.head_dim), kThreads, S(stream))
  (k, v, slots, n, layer, g, num_blocks, type, cache, error);
  return Last();
}

int LaunchArgMax(const float* logits, int64_t rows, int64_t cols, int32_t* ids, void* stream) {
  if (rows == 0) return cudaSuccess;
  TANDEM_LAUNCH(ArgMaxKernel, static_cast<unsigned>(rows), kThreads, S(stream))(logits, cols, ids);
  return Last();
}

int LaunchToBf16(const float* x, int64_t n, uint16_t* out, void* stream) {
  if (n == 0) return cudaSuccess;
  TANDEM_LAUNCH(ToBf16Kernel, Grid(n), kThreads, S(stream))
  (x, n, reinterpret_cast<__nv_bfloat16*>(out));
  return Last();
}

}  // namespace tandem::kernels::cuda
