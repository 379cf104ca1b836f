// Launchers of the CUDA element-wise and row kernels behind CudaBackend (ops_kernels.cu):
// plain types only, so host code includes this without CUDA headers. Every pointer is
// device memory; every launcher returns the cudaError_t of its launch (0 = success)
// and never synchronizes.
//
// Each kernel is the CUDA half of a trio: its CPU reference is the CpuBackend op of
// the same name (kernels/cpu/ops.h, attention.h) and cuda_backend_test.cc compares
// the two at awkward sizes on a device.
//
// Bad input only the device can see (a token id or row index read from device memory)
// is not read out of bounds: the kernel writes zeros for that row and records the
// first such error in `*error` (a DeviceError code); CudaBackend reports it as a
// Status at the next Synchronize.
#ifndef TANDEM_KERNELS_CUDA_OPS_KERNELS_H_
#define TANDEM_KERNELS_CUDA_OPS_KERNELS_H_

#include <cstdint>

#include "kernels/cuda/attention_tile.h"

namespace tandem::kernels::cuda {

// Codes a kernel leaves in the backend's device error word (first one wins).
enum DeviceError : int32_t {
  kDeviceOk = 0,
  kBadTokenId = 1,   // Embedding: id outside the table
  kBadRowIndex = 2,  // GatherRows: row outside the source
  kBadSlot = 3,      // WriteKv: slot outside the KV storage
};

// Element types the kernels read and write besides float32 (GGUF's numbering is not
// needed here).
enum class Elem : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// out [n][cols] f32 = rows ids[0..n) of table [rows][cols] (elements `type`).
int LaunchEmbedding(const void* table, Elem type, int64_t rows, int64_t cols, const int32_t* ids,
                    int64_t n, float* out, int32_t* error, void* stream);

// out [rows][dim] = x / sqrt(mean(x²) + eps) × weight; one thread block per row, a
// fixed reduction order (a row's result does not depend on the batch).
int LaunchRmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* out, void* stream);

// x [rows][dim] += y, then out = RmsNorm(x) as LaunchRmsNorm: one block per row.
int LaunchAddRmsNorm(float* x, const float* y, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* out, void* stream);

// table [n][rope_dim]: cos | sin of pos/position_scale × inv_freq(i) (÷ freq_factors[i]
// when given), times attention_factor, as BuildRopeTable (kernels/cpu/ops.h).
int LaunchRopeTable(const int32_t* positions, int64_t n, const float* freq_factors,
                    int32_t rope_dim, float theta, float position_scale, float attention_factor,
                    float* table, void* stream);

// x [n][n_heads][head_dim] rotated in place by row t of `table`; `halves`: pairs
// (i, i + rope_dim/2), else (2i, 2i+1).
int LaunchRope(float* x, int64_t n, int32_t n_heads, int32_t head_dim, int32_t rope_dim,
               bool halves, const float* table, void* stream);

// out = silu(gate) × up over n elements (out may be gate).
int LaunchSwiGlu(const float* gate, const float* up, int64_t n, float* out, void* stream);

// out = gelu_tanh(gate) × up over n elements (out may be gate).
int LaunchGeGlu(const float* gate, const float* up, int64_t n, float* out, void* stream);

// x *= factor over n elements.
int LaunchScale(float* x, int64_t n, float factor, void* stream);

// x = cap · tanh(x / cap) over n elements.
int LaunchSoftCap(float* x, int64_t n, float cap, void* stream);

// x += y over n elements.
int LaunchAdd(float* x, const float* y, int64_t n, void* stream);

// x [rows][dim] += bias [dim].
int LaunchAddBias(float* x, const float* bias, int64_t rows, int64_t dim, void* stream);

// dst [n][row_bytes] = rows idx[0..n) of src [src_rows][row_bytes] (row_bytes a
// multiple of 4).
int LaunchGatherRows(const void* src, int64_t src_rows, int64_t row_bytes, const int32_t* idx,
                     int64_t n, void* dst, int32_t* error, void* stream);

// k, v [n][n_kv_heads][head_dim] f32 of `layer` into cache slots `slots` [n] (block ×
// block_size + offset, block < num_blocks) of the paged cache `g` describes (in
// elements; attention_tile.h), converted to `type` with round-to-nearest-even.
int LaunchWriteKv(const float* k, const float* v, const int32_t* slots, int64_t n, int32_t layer,
                  const tile::KvGeometry& g, int64_t num_blocks, Elem type, void* cache,
                  int32_t* error, void* stream);

// ids [rows] = the arg-max of each row of logits [rows][cols] (select.h's rule; an
// all-NaN row gives 0); one thread block per row.
int LaunchArgMax(const float* logits, int64_t rows, int64_t cols, int32_t* ids, void* stream);

// out [n] bf16 = x [n] f32, round-to-nearest-even (a GEMM's activation operand).
int LaunchToBf16(const float* x, int64_t n, uint16_t* out, void* stream);

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_OPS_KERNELS_H_
