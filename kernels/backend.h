// Backend: the operations the model executor needs, implemented once per device.
//
// The executor (common/engine/model_executor) is written only against this
// interface. Buffers are device memory of the backend (host memory for the CPU
// backend); shapes are given beside each call. Every op is batch-invariant: a row's
// result depends only on that row's inputs. A Backend is used by one engine thread.
#ifndef TANDEM_KERNELS_BACKEND_H_
#define TANDEM_KERNELS_BACKEND_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "common/kv/kv_cache.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace tandem::kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // out [ids.size()][table.cols] = rows `ids` of `table`, decoded to float32.
  virtual void Embedding(const WeightMatrix& table, std::span<const int32_t> ids, float* out) = 0;
  // out [m][w.rows] = x [m][w.cols] · Wᵀ
  virtual void MatMul(const float* x, int64_t m, const WeightMatrix& w, float* out) = 0;
  // Two or three products of the same x at once (Q/K/V, gate/up); same results.
  virtual void MatMul2(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
                       const WeightMatrix& w1, float* out1) = 0;
  virtual void MatMul3(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
                       const WeightMatrix& w1, float* out1, const WeightMatrix& w2,
                       float* out2) = 0;
  virtual void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                       float* out) = 0;
  // x [n][n_heads][head_dim] rotated in place by the angles of `table` (one row per
  // token, built once per pass with BuildRopeTable).
  virtual void Rope(float* x, int64_t n, int32_t n_heads, const RopeTable& table,
                    const RopeParams& p) = 0;
  virtual void SwiGlu(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // x [rows][dim] += bias [dim] for every row.
  virtual void AddBias(float* x, const float* bias, int64_t rows, int64_t dim) = 0;
  virtual void WriteKv(const float* k, const float* v, const PagedBatch& batch, int32_t layer,
                       kv::KvCache* cache) = 0;
  virtual void Attention(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                         int32_t layer, const kv::KvCache& cache, float* out) = 0;
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_BACKEND_H_
