#include "kernels/cpu/cpu_backend.h"

#include "common/model/dequantize.h"
#include "common/util/check.h"

namespace tandem::kernels {

void CpuBackend::Embedding(const WeightMatrix& table, std::span<const int32_t> ids, float* out) {
  const size_t rb = table.RowBytes();
  for (size_t i = 0; i < ids.size(); ++i) {
    TANDEM_CHECK(ids[i] >= 0 && ids[i] < table.rows);
    TANDEM_CHECK(model::Dequantize(table.type, {table.data + ids[i] * rb, rb},
                                   {out + i * table.cols, static_cast<size_t>(table.cols)})
                     .ok());
  }
}

void CpuBackend::MatMul(const float* x, int64_t m, const WeightMatrix& w, float* out) {
  kernels::MatMul(x, m, w, out, pool_.get());
}

void CpuBackend::MatMul2(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
                         const WeightMatrix& w1, float* out1) {
  MatMulGroup(x, m, {&w0, &w1}, {&out0, &out1}, pool_.get());
}

void CpuBackend::MatMul3(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
                         const WeightMatrix& w1, float* out1, const WeightMatrix& w2, float* out2) {
  MatMulGroup(x, m, {&w0, &w1, &w2}, {&out0, &out1, &out2}, pool_.get());
}

void CpuBackend::RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                         float* out) {
  pool_->ParallelFor(rows, [&](int64_t b, int64_t e, int) {
    kernels::RmsNorm(x + b * dim, weight, e - b, dim, eps, out + b * dim);
  });
}

void CpuBackend::Rope(float* x, int64_t n, int32_t n_heads, const RopeTable& table,
                      const RopeParams& p) {
  pool_->ParallelFor(n, [&](int64_t b, int64_t e, int) {
    ApplyRope(x + b * n_heads * p.head_dim, e - b, n_heads, table, b, p);
  });
}

void CpuBackend::SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  pool_->ParallelFor(
      n, [&](int64_t b, int64_t e, int) { kernels::SwiGlu(gate + b, up + b, e - b, out + b); },
      1024);
}

void CpuBackend::Add(float* x, const float* y, int64_t n) { AddInPlace(x, y, n); }

void CpuBackend::AddBias(float* x, const float* bias, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) AddInPlace(x + r * dim, bias, dim);
}

void CpuBackend::WriteKv(const float* k, const float* v, const PagedBatch& batch, int32_t layer,
                         kv::KvCache* cache) {
  kernels::WriteKv(k, v, batch, layer, cache);
}

void CpuBackend::Attention(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                           int32_t layer, const kv::KvCache& cache, float* out) {
  PagedAttention(q, batch, shape, layer, cache, out, pool_.get());
}

}  // namespace tandem::kernels
