// CpuBackend: the Backend on host memory, with a thread pool for the heavy ops.
//
// Every op runs when it is called (the "stream" is the calling thread), so events
// are complete when recorded and Synchronize only reports the sticky error. Weights
// stay zero-copy views of the mapped GGUF file (BorrowHost).
//
// The fence variant (options.fence) proves the layers above never touch backend
// memory from the host: each buffer is one memfd mapped twice — the address handed
// out (Buffer::address) is mapped PROT_NONE, the kernels work through the other
// mapping — so any host dereference outside this backend crashes. BorrowHost is
// refused there (weights are copied in, as a device backend would).
//
// Thread safety: one engine thread; ReadNow, CopyNow and Event::Wait from any thread.
#ifndef TANDEM_KERNELS_CPU_CPU_BACKEND_H_
#define TANDEM_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: every core
  bool fence = false;
  CpuMath math = CpuMath::kExact;  // kernels/backend.h
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);
  std::string_view name() const override { return fence_ ? "cpu-fence" : "cpu"; }
  CpuMath math() const { return math_; }
  int num_threads() const override { return pool_->num_threads(); }

  // Test hook, callable from any thread: the compute op (not a copy) after the next
  // `after_ops` ones fails with `error`, as a device fault would, and the rest of its
  // pass is skipped.
  void InjectFault(absl::Status error, int64_t after_ops = 0) {
    std::lock_guard<std::mutex> lock(fault_mu_);
    injected_ = std::move(error);
    fault_countdown_ = after_ops;
  }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(MemoryKind kind, int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> BorrowHost(const void* host, int64_t bytes) override;
  void CopyToDevice(const void* src, const Buffer& dst, int64_t offset, int64_t bytes) override;
  void CopyToHost(const Buffer& src, int64_t offset, int64_t bytes, void* dst) override;
  absl::Status ReadNow(const Buffer& src, int64_t offset, int64_t bytes, void* dst) const override;
  absl::Status CopyNow(const Copy2D& copy) const override;
  std::shared_ptr<Event> RecordEvent() override;
  absl::Status Synchronize() override;

  void Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void MatMul(const Tensor& x, const Tensor& w, const Tensor& out) override;
  void MatMul2(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
               const Tensor& out1) override;
  void MatMul3(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
               const Tensor& out1, const Tensor& w2, const Tensor& out2) override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override;
  void RopeTable(const Tensor& positions, const Tensor& freq_factors, const RopeParams& p,
                 const Tensor& table) override;
  void Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) override;
  void SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void GeGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void Scale(const Tensor& x, float factor) override;
  void SoftCap(const Tensor& x, float cap) override;
  void Add(const Tensor& x, const Tensor& y) override;
  void AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                  const Tensor& out) override;
  void MoeRoute(const Tensor& logits, const Tensor& bias, const MoeRouting& r, const Tensor& ids,
                const Tensor& weights) override;
  void MoeFfn(const Tensor& x, const Tensor& ids, const Tensor& weights,
              const ExpertWeights& experts, GatedActivation act, const Tensor& out) override;
  void AddBias(const Tensor& x, const Tensor& bias) override;
  void GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) override;
  void ArgMax(const Tensor& logits, const Tensor& ids) override;
  void WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
               KvStorage* kv) override;
  void Attention(const Tensor& q, const StepView& step, const AttentionShape& shape, int32_t layer,
                 const KvStorage& kv, const Tensor& out) override;

 private:
  // False (and the op or copy is skipped) once the pass has failed; a compute op
  // (`op`) also takes an injected fault.
  bool Proceed(bool op = true);
  // out = act(gate, up) element-wise, split across the pool (SwiGlu, GeGlu).
  void Gated(const Tensor& gate, const Tensor& up, const Tensor& out,
             void (*act)(const float*, const float*, int64_t, float*));
  void Fail(absl::Status error);
  // *outs[i] = x · ws[i]ᵀ for a group sharing x: fast math where every matrix of the
  // group has an integer path (x quantized once for all), the float path otherwise.
  void Gemms(const Tensor& x, std::initializer_list<const WeightMatrix*> ws,
             std::initializer_list<float* const*> outs);
  void Gemms(const float* x, int64_t rows, int64_t cols,
             std::initializer_list<const WeightMatrix*> ws,
             std::initializer_list<float* const*> outs);
  // rows [rows][gate.cols] through one gated FFN (a shared expert) into out
  // [rows][down.rows], then 2 × gate.rows scratch floats per row after it.
  void GatedFfn(const float* x, int64_t rows, const WeightMatrix& gate, const WeightMatrix& up,
                const WeightMatrix& down, GatedActivation act, float* out);

  std::vector<float> moe_scratch_;  // MoeFfn's gathered rows and products; grows only
  const bool fence_;
  const CpuMath math_;
  std::unique_ptr<ThreadPool> pool_;
  absl::Status error_;  // sticky until Synchronize
  std::mutex fault_mu_;
  absl::Status injected_ ABSL_GUARDED_BY(fault_mu_);        // InjectFault's, taken by an op
  int64_t fault_countdown_ ABSL_GUARDED_BY(fault_mu_) = 0;  // ops to pass before it
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_CPU_BACKEND_H_
