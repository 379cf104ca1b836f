// CpuBackend: the Backend on host memory, with a thread pool for the heavy ops.
#ifndef TANDEM_KERNELS_CPU_CPU_BACKEND_H_
#define TANDEM_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int num_threads) : pool_(std::make_unique<ThreadPool>(num_threads)) {}
  std::string_view name() const override { return "cpu"; }
  int num_threads() const { return pool_->num_threads(); }

  void Embedding(const WeightMatrix& table, std::span<const int32_t> ids, float* out) override;
  void MatMul(const float* x, int64_t m, const WeightMatrix& w, float* out) override;
  void MatMul2(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
               const WeightMatrix& w1, float* out1) override;
  void MatMul3(const float* x, int64_t m, const WeightMatrix& w0, float* out0,
               const WeightMatrix& w1, float* out1, const WeightMatrix& w2, float* out2) override;
  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
               float* out) override;
  void Rope(float* x, int64_t n, int32_t n_heads, const RopeTable& table,
            const RopeParams& p) override;
  void SwiGlu(const float* gate, const float* up, int64_t n, float* out) override;
  void Add(float* x, const float* y, int64_t n) override;
  void AddBias(float* x, const float* bias, int64_t rows, int64_t dim) override;
  void WriteKv(const float* k, const float* v, const PagedBatch& batch, int32_t layer,
               kv::KvCache* cache) override;
  void Attention(const float* q, const PagedBatch& batch, const AttentionShape& shape,
                 int32_t layer, const kv::KvCache& cache, float* out) override;

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_CPU_BACKEND_H_
